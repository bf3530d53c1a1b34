package destination

import (
	"errors"
	"fmt"
	"testing"

	"github.com/actionledger/actionledger/internal/httpexec"
)

// A request that could not be signed is recorded as SigningFailed, one without a token as TokenUnavailable,
// also when the error is wrapped on its way.
func TestAuthorizeClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want httpexec.ErrorClass
	}{
		{&signingError{err: errors.New("signing the request (Standard Webhooks): bad key")}, httpexec.ClassSigningFailed},
		{fmt.Errorf("post-check: %w", &signingError{err: errors.New("x")}), httpexec.ClassSigningFailed},
		{errors.New("oauth2 token endpoint: answered HTTP 503"), httpexec.ClassTokenUnavailable},
	} {
		if got := ErrorClass(c.err); got != c.want {
			t.Errorf("ErrorClass(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
