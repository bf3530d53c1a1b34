// Package destination turns an ExternalAction's destinationRef into a Resolved destination: its spec with every
// default applied (timeout, key header, retry policy, limits, retention), and, right before a request, its
// credentials (LoadCredentials) and the per-request auth seam (Authorize: OAuth2 token, signature, and the
// drop of a token refused with 401). Nothing here decides or writes status.
package destination

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/redact"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/internal/shard"
)

// Resolver resolves destinations for the ExternalAction controller.
type Resolver struct {
	// Client reads Destinations, ClusterDestinations and Namespace metadata (the manager's cache).
	Client client.Reader
	// Secrets reads the Secrets a destination names, live from the API server (the manager's APIReader), when
	// Tenants is nil.
	Secrets client.Reader
	// Tenants chooses whose rights read a destination's Secrets (a namespaced Destination's: a ServiceAccount
	// of its namespace, by impersonation); nil reads every destination's with Secrets.
	Tenants *TenantSecrets
	// ControllerNamespace is where ClusterDestinations read their Secrets.
	ControllerNamespace string
	// InsecureSkipVerifyAllowed lets namespaced Destinations turn TLS verification off.
	InsecureSkipVerifyAllowed bool
	// Shards divides each destination's limits among the shards using it; nil: no sharding.
	Shards *shard.Membership
	// Tokens caches OAuth2 access tokens (nil: made on first use from Executor's TokenClient, so that the
	// egress policy applies to token endpoints too).
	Tokens *httpexec.TokenCache
	// Executor offers the token client when Tokens is nil.
	Executor httpexec.Executor
	// Clock signs requests at its now.
	Clock clock.PassiveClock

	tokensMu sync.Mutex
}

// errNoTokenClient: a destination uses auth.oauth2 but the resolver has no TokenCache and its executor cannot
// make one.
var errNoTokenClient = errors.New("no OAuth2 token client: the executor provides none (set the reconciler's Options.Tokens)")

// tokenCache returns r.Tokens, made on first use from an executor that offers TokenClient (httpexec.HTTPExecutor).
func (r *Resolver) tokenCache() (*httpexec.TokenCache, error) {
	r.tokensMu.Lock()
	defer r.tokensMu.Unlock()
	if r.Tokens == nil {
		tc, ok := r.Executor.(interface {
			TokenClient(*httpexec.TLSOptions) (*http.Client, error)
		})
		if !ok {
			return nil, fmt.Errorf("%w: %w", httpexec.ErrTokenUnavailable, errNoTokenClient)
		}
		r.Tokens = httpexec.NewTokenCache(tc.TokenClient)
	}
	return r.Tokens, nil
}

// Authorize adds what is computed per request to h: the OAuth2 access token (spec.auth.oauth2, from the
// resolver's token cache) and then the signature (spec.signing, made at the clock's now over body, with the
// idempotency key as the message id), so that each attempt is signed anew. It returns the redactor of this
// request (the destination's Secret values plus the token) and the token sent ("" without oauth2). An error
// means that no token could be obtained or the request not signed, and nothing may be sent (ErrorClass says
// which); its text names no secret. Call it only after LoadCredentials.
func (rd *Resolved) Authorize(ctx context.Context, h http.Header, body []byte, key string) (*redact.Redactor, string, error) {
	red, token := rd.Redactor, ""
	if rd.OAuth2 != nil {
		tokens, err := rd.tokens()
		if err != nil {
			return red, "", err
		}
		if token, err = tokens.Token(ctx, rd.ID, *rd.OAuth2); err != nil {
			return red, "", err
		}
		h.Set("Authorization", "Bearer "+token)
		red = red.With(token, "Bearer "+token)
	}
	if rd.Signer != nil {
		if err := rd.Signer.Sign(h, key, body, rd.clock.Now()); err != nil {
			return red, token, &signingError{err: err}
		}
	}
	return red, token, nil
}

// Refused drops the cached token that the destination refused with a 401 (RFC 6750 section 3.1), so that the
// next request fetches a new one. It reports whether it did.
func (rd *Resolved) Refused(token string, res httpexec.Result) bool {
	if token == "" || res.Response == nil || res.Response.StatusCode != http.StatusUnauthorized {
		return false
	}
	if tokens, err := rd.tokens(); err == nil {
		tokens.Invalidate(rd.ID, token)
	}
	return true
}

// signingError: spec.signing could not sign the request (Authorize); nothing was sent.
type signingError struct{ err error }

func (e *signingError) Error() string { return e.err.Error() }
func (e *signingError) Unwrap() error { return e.err }

// ErrorClass is the errorClass of an Authorize failure: SigningFailed for the signature, else
// TokenUnavailable (no OAuth2 access token).
func ErrorClass(err error) httpexec.ErrorClass {
	if _, ok := errors.AsType[*signingError](err); ok {
		return httpexec.ClassSigningFailed
	}
	return httpexec.ClassTokenUnavailable
}

// ID is the limiter and metrics identity of the action's destination: "Destination/<ns>/<name>" or
// "ClusterDestination/<name>".
func ID(xa *actionsv1alpha1.ExternalAction) string {
	if xa.Spec.DestinationRef.Kind == KindClusterDestination {
		return "ClusterDestination/" + xa.Spec.DestinationRef.Name
	}
	return "Destination/" + xa.Namespace + "/" + xa.Spec.DestinationRef.Name
}

// RepeatSafe: effect Safe or Idempotent (explicit, or from the method per RFC 9110 section 9.2), or the
// destination dedups on the key (CONTRACT).
func (rd *Resolved) RepeatSafe(xa *actionsv1alpha1.ExternalAction) bool {
	return retry.RepeatSafe(string(rd.Spec.Effect), Method(xa), rd.KeySupported)
}

// Claimless reports whether the destination lets xa's first attempt go without a claim: idempotency.claim is
// WhenUnsafe and repeating xa's request is safe (RepeatSafe).
func (rd *Resolved) Claimless(xa *actionsv1alpha1.ExternalAction) bool {
	idem := rd.Spec.Idempotency
	return idem != nil && idem.Claim == actionsv1alpha1.ClaimWhenUnsafe && rd.RepeatSafe(xa)
}

// Method is the action's HTTP method, upper case (default POST).
func Method(xa *actionsv1alpha1.ExternalAction) string {
	if m := strings.ToUpper(xa.Spec.Request.Method); m != "" {
		return m
	}
	return http.MethodPost
}

// Requeue after a wait on the destination, without a watch event: how often an action waiting on an unusable
// destination looks again (a Destination, ClusterDestination or Namespace watch event wakes it sooner).
const Recheck = 15 * time.Second
