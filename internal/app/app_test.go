package app

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// --default-service-account must be a ServiceAccount name; the manager refuses to start otherwise, before it
// contacts the API server.
func TestDefaultServiceAccountMustBeAName(t *testing.T) {
	_, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{DefaultServiceAccount: "Sender_1"})
	if err == nil || !strings.Contains(err.Error(), "--default-service-account") {
		t.Fatalf("err = %v, want the flag named", err)
	}
}
