package gateway

import (
	"context"
	"errors"
	"net/http"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

// callerKey is the context key of the caller a request to the API server acts as.
type callerKey struct{}

// asCaller returns ctx carrying u: a request made with it through a client of ImpersonatingConfig acts as u.
func asCaller(ctx context.Context, u user.Info) context.Context {
	return context.WithValue(ctx, callerKey{}, u)
}

// errNoCaller is the error of a request through ImpersonatingConfig whose context carries no caller: such a
// client never falls back to the gateway's own identity.
var errNoCaller = errors.New("gateway: an API request as the caller was made without a caller")

// ImpersonatingConfig returns a copy of cfg whose requests act as the caller in their context (asCaller),
// with Kubernetes impersonation headers (Impersonate-User, -Uid, -Group, -Extra-*) set by client-go's
// transport.NewImpersonatingRoundTripper. A request without a caller fails with errNoCaller before it is
// sent. The gateway creates and live-reads ExternalActions through it, so the API server's authorization,
// admission (request.userInfo) and audit see the caller, not the gateway's ServiceAccount.
func ImpersonatingConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &callerTransport{next: rt} })
	return c
}

type callerTransport struct{ next http.RoundTripper }

func (t *callerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	u, ok := r.Context().Value(callerKey{}).(user.Info)
	if !ok || u.GetName() == "" {
		return nil, errNoCaller
	}
	return transport.NewImpersonatingRoundTripper(Impersonation(u), t.next).RoundTrip(r)
}

// Impersonation is what the gateway asks the API server to act as for caller u, in the form constrained
// impersonation (KEP-5284, beta and on by default since Kubernetes 1.36) accepts:
//
//   - a ServiceAccount ("system:serviceaccount:<namespace>:<name>") by its user name alone: the API server
//     sets its groups itself (system:serviceaccounts, system:serviceaccounts:<namespace>,
//     system:authenticated), and the serviceaccount mode refuses groups, extra and a UID. The token's extra
//     (credential ID, bound pod) is therefore not carried over;
//   - any other user with its UID, groups and extra as the TokenReview returned them. The API server refuses
//     system:masters in this mode.
func Impersonation(u user.Info) transport.ImpersonationConfig {
	if _, _, err := serviceaccount.SplitUsername(u.GetName()); err == nil {
		return transport.ImpersonationConfig{UserName: u.GetName()}
	}
	return transport.ImpersonationConfig{UserName: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}
}
