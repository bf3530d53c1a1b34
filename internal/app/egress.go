package app

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/actionledger/actionledger/internal/egress"
)

// APIServerRefreshInterval is how often the API server's addresses are read again (1 minute).
const APIServerRefreshInterval = time.Minute

// apiServerObject is the Service and EndpointSlice the API server maintains for itself (Kubernetes
// "default/kubernetes"; its EndpointSlice has the same name).
var apiServerObject = types.NamespacedName{Namespace: "default", Name: "kubernetes"}

// +kubebuilder:rbac:groups="",resources=services,verbs=get,resourceNames=kubernetes
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get,resourceNames=kubernetes

// apiServerAddresses keeps the egress policy's API server addresses current. Its sources are the host
// of the manager's own rest config (resolved when it is a name), the cluster IPs of the Service
// default/kubernetes and the endpoint addresses of its EndpointSlice default/kubernetes (read with direct
// GETs, nothing cached or watched). It reads them once in New, before anything is sent, and then every
// interval; a source that cannot be read keeps its last known addresses, so a transient error never
// opens an address again.
type apiServerAddresses struct {
	policy   *egress.Policy
	reader   client.Reader
	host     string // rest.Config.Host
	resolver interface {
		LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	}
	interval time.Duration
	log      logr.Logger

	last    map[string][]netip.Addr // per source: "host", "service", "endpointslice"
	missing map[string]bool         // sources whose object the API server answered NotFound for, last time
}

// refresh reads every source and sets the union on the policy.
func (a *apiServerAddresses) refresh(ctx context.Context) {
	if a.last == nil {
		a.last = map[string][]netip.Addr{}
	}
	if a.missing == nil {
		a.missing = map[string]bool{}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	read := func(source string, f func() ([]netip.Addr, error)) {
		addrs, err := f()
		if apierrors.IsNotFound(err) {
			// An answer, not a failure: the cluster publishes no such object (an API server with
			// --endpoint-reconciler-type=none keeps no EndpointSlice default/kubernetes). Nothing to add; the
			// last known addresses stay denied. Said once, at info level, until the object appears.
			if !a.missing[source] {
				a.log.Info("The API server publishes no "+source+" default/kubernetes; its addresses come from the other sources",
					"source", source, "addresses", a.last[source])
			}
			a.missing[source] = true
			return
		}
		if err != nil {
			a.log.Error(err, "Cannot read the API server's addresses; keeping the last known ones",
				"source", source, "addresses", a.last[source])
			return
		}
		delete(a.missing, source)
		a.last[source] = addrs
	}
	read("host", func() ([]netip.Addr, error) { return a.hostAddrs(ctx) })
	read("service", func() ([]netip.Addr, error) {
		svc := &corev1.Service{}
		if err := a.reader.Get(ctx, apiServerObject, svc); err != nil {
			return nil, err
		}
		return parseAddrs(append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...)), nil
	})
	read("endpointslice", func() ([]netip.Addr, error) {
		es := &discoveryv1.EndpointSlice{}
		if err := a.reader.Get(ctx, apiServerObject, es); err != nil {
			return nil, err
		}
		var s []string
		for _, ep := range es.Endpoints {
			s = append(s, ep.Addresses...)
		}
		return parseAddrs(s), nil
	})
	var all []netip.Addr
	for _, source := range []string{"host", "service", "endpointslice"} {
		all = append(all, a.last[source]...)
	}
	before := a.policy.APIServer()
	a.policy.SetAPIServer(all)
	if after := a.policy.APIServer(); !slices.Equal(before, after) {
		a.log.Info("Denying the API server's addresses", "addresses", after)
	}
}

// hostAddrs returns the rest config host's addresses: the literal, or what the name resolves to.
func (a *apiServerAddresses) hostAddrs(ctx context.Context) ([]netip.Addr, error) {
	h := a.host
	if u, err := url.Parse(h); err == nil && u.Host != "" {
		h = u.Host
	}
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.Trim(h, "[]")
	if h == "" {
		return nil, nil
	}
	if addr, err := netip.ParseAddr(h); err == nil {
		return []netip.Addr{addr}, nil
	}
	return a.resolver.LookupNetIP(ctx, "ip", h)
}

func parseAddrs(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// Start refreshes every interval until ctx ends (manager.Runnable).
func (a *apiServerAddresses) Start(ctx context.Context) error {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.refresh(ctx)
		}
	}
}

// NeedLeaderElection is false: every replica's executor and validator need the addresses.
func (a *apiServerAddresses) NeedLeaderElection() bool { return false }
