package app

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/actionledger/actionledger/internal/egress"
)

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// The API server's addresses come from the rest config host (resolved), the default/kubernetes Service's
// cluster IPs and its EndpointSlice; a source that fails later keeps its last known addresses.
func TestAPIServerAddresses(t *testing.T) {
	meta := metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}
	svc := &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1", "fd00:10:96::1"}}}
	es := &discoveryv1.EndpointSlice{ObjectMeta: meta, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.168.1.10"}}, {Addresses: []string{"192.168.1.11"}}}}
	var fail bool
	c := fake.NewClientBuilder().WithScheme(Scheme).WithObjects(svc, es).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if fail {
				return errors.New("forbidden")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	p := egress.New(egress.Config{})
	a := &apiServerAddresses{policy: p, reader: c, host: "https://api.cluster.test:6443",
		resolver: fakeResolver{"api.cluster.test": addrs("10.0.0.5")}, log: logr.Discard()}
	a.refresh(context.Background())
	want := addrs("10.0.0.5", "10.96.0.1", "192.168.1.10", "192.168.1.11", "fd00:10:96::1")
	if got := p.APIServer(); !slices.Equal(got, want) {
		t.Fatalf("APIServer() = %v, want %v", got, want)
	}
	for _, s := range want {
		if p.Check(s) == nil {
			t.Errorf("%s allowed, want denied as an API server address", s)
		}
	}
	fail = true
	a.refresh(context.Background())
	if got := p.APIServer(); !slices.Equal(got, want) {
		t.Errorf("after failed reads APIServer() = %v, want the last known %v", got, want)
	}
}

func TestAPIServerHostForms(t *testing.T) {
	for host, want := range map[string][]netip.Addr{
		"https://127.0.0.1:6443":     addrs("127.0.0.1"),
		"https://[::1]:6443":         addrs("::1"),
		"10.96.0.1:443":              addrs("10.96.0.1"),
		"https://kubernetes.default": addrs("10.96.0.1"),
		"":                           nil,
	} {
		a := &apiServerAddresses{host: host, resolver: fakeResolver{"kubernetes.default": addrs("10.96.0.1")}}
		got, err := a.hostAddrs(context.Background())
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("hostAddrs(%q) = %v, %v, want %v", host, got, err, want)
		}
	}
}

// A cluster without the EndpointSlice default/kubernetes (an API server with --endpoint-reconciler-type=none) is
// healthy: NotFound is an answer, logged once at info level, never an error-level line; the other sources still
// give the addresses, and the slice's last known addresses stay denied.
func TestAPIServerAddressesWithoutEndpointSlice(t *testing.T) {
	meta := metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}
	svc := &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1"}}
	c := fake.NewClientBuilder().WithScheme(Scheme).WithObjects(svc).Build()
	sink := &recordingSink{}
	p := egress.New(egress.Config{})
	a := &apiServerAddresses{policy: p, reader: c, host: "https://127.0.0.1:6443", resolver: fakeResolver{},
		log: logr.New(sink)}
	a.refresh(context.Background())
	a.refresh(context.Background())
	if want := addrs("10.96.0.1", "127.0.0.1"); !slices.Equal(p.APIServer(), want) {
		t.Errorf("APIServer() = %v, want %v", p.APIServer(), want)
	}
	if sink.errors != 0 {
		t.Errorf("%d error-level lines for a missing EndpointSlice, want 0", sink.errors)
	}
	if n := sink.count("The API server publishes no endpointslice"); n != 1 {
		t.Errorf("%d info lines about the missing EndpointSlice over two refreshes, want 1: %v", n, sink.infos)
	}
}

type recordingSink struct {
	infos  []string
	errors int
}

func (s *recordingSink) Init(logr.RuntimeInfo)            {}
func (s *recordingSink) Enabled(int) bool                 { return true }
func (s *recordingSink) Info(_ int, msg string, _ ...any) { s.infos = append(s.infos, msg) }
func (s *recordingSink) Error(error, string, ...any)      { s.errors++ }
func (s *recordingSink) WithValues(...any) logr.LogSink   { return s }
func (s *recordingSink) WithName(string) logr.LogSink     { return s }
func (s *recordingSink) count(prefix string) int {
	n := 0
	for _, m := range s.infos {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}
