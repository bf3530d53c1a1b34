package app

import (
	"os"
	"strings"
	"testing"
)

// On the node's network (hostNetwork: true) the host name is the node's, the same for every replica there: the
// claim holder names the pod from $POD_NAME (the chart's downward API), and is new for every process start.
func TestNewHolderNamesThePod(t *testing.T) {
	t.Setenv(PodNameEnv, "actionledger-controller-manager-7b4fc7b7d-fpwts")
	a, b := NewHolder(), NewHolder()
	if !strings.HasPrefix(a, "actionledger-controller-manager-7b4fc7b7d-fpwts_") || a == b {
		t.Errorf("NewHolder() = %q, %q: want the pod's name, then _ and a nonce new for each call", a, b)
	}
	t.Setenv(PodNameEnv, "")
	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name: %v", err)
	}
	if got := NewHolder(); !strings.HasPrefix(got, host+"_") {
		t.Errorf("without %s: NewHolder() = %q, want the host name %q first", PodNameEnv, got, host)
	}
}
