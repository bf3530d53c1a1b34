package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/actionledger/actionledger/internal/scheme"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RunOptions configure Run.
type RunOptions struct {
	Options
	// BindAddress is the gateway's listen address (e.g. ":9443").
	BindAddress string
	// ProbeAddress serves /healthz and /readyz over plain HTTP, without authentication, for the kubelet;
	// "0" or "" disables it (the API listener answers them too).
	ProbeAddress string
	// MetricsBindAddress serves /metrics (authenticated and authorized like the API: "get" on the
	// non-resource URL /metrics); "0" or "" disables it.
	MetricsBindAddress string
	// TLSCertFile and TLSKeyFile are the serving certificate and key (PEM), reloaded when the files change
	// (controller-runtime's certwatcher), so a mounted cert-manager Secret can rotate.
	TLSCertFile, TLSKeyFile string
	// Insecure serves plain HTTP instead of TLS, for local tests only: it refuses a non-loopback bind address,
	// since bearer tokens would cross the network in clear text.
	Insecure bool
	// AuthCacheTTL is how long TokenReview and allowed SubjectAccessReview decisions are cached (default 10s);
	// denials are cached for a fifth of it.
	AuthCacheTTL time.Duration
	// EnableHTTP2 offers HTTP/2 over TLS; off by default, as for the manager's metrics server (kubebuilder's
	// default since the HTTP/2 stream-reset attacks, CVE-2023-44487 and CVE-2023-39325).
	EnableHTTP2 bool
	// ShutdownGrace is how long open requests may finish after ctx ends (default 15s).
	ShutdownGrace time.Duration
	// Ready, when set, is called with the listen addresses once the gateway serves.
	Ready func(api, metrics net.Addr)
}

// webhookBackoff is k8s.io/apiserver's DefaultAuthWebhookRetryBackoff (server/options), as
// controller-runtime's metrics filters copy it.
func webhookBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// Delegating returns k8s.io/apiserver's delegating authenticator (TokenReview, anonymous requests refused)
// and authorizer (SubjectAccessReview), with decisions cached for ttl (denials for ttl/5).
func Delegating(cfg *rest.Config, ttl time.Duration) (*authenticatorfactory.DelegatingAuthenticatorConfig,
	authorizer.Authorizer, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("clientset: %w", err)
	}
	authn := &authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 ttl,
		TokenAccessReviewClient:  cs.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      webhookBackoff(),
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cs.AuthorizationV1(),
		AllowCacheTTL:             ttl,
		DenyCacheTTL:              ttl / 5,
		WebhookRetryBackoff:       webhookBackoff(),
	}.New()
	if err != nil {
		return nil, nil, fmt.Errorf("authorizer: %w", err)
	}
	return authn, authz, nil
}

// Run serves the gateway until ctx ends: it starts the informer cache of ExternalActions and ActionTombstones,
// waits for it to sync, and listens on BindAddress (and MetricsBindAddress).
func Run(ctx context.Context, cfg *rest.Config, o RunOptions) error {
	if o.AuthCacheTTL <= 0 {
		o.AuthCacheTTL = DefaultAuthCacheTTL
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = DefaultShutdownGrace
	}
	tlsCfg, err := serverTLS(ctx, o)
	if err != nil {
		return err
	}
	authnCfg, authz, err := Delegating(cfg, o.AuthCacheTTL)
	if err != nil {
		return err
	}
	authn, _, err := authnCfg.New()
	if err != nil {
		return fmt.Errorf("authenticator: %w", err)
	}
	o.Authenticator, o.Authorizer = authn, authz
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	g, ca, err := newFromConfig(ctx, cfg, o)
	if err != nil {
		return err
	}
	cacheErr := make(chan error, 1)
	go func() { cacheErr <- ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return errors.New("the informer cache did not sync")
	}
	return serve(ctx, g, o, tlsCfg, cacheErr)
}

// Defaults of RunOptions.
const (
	// DefaultAuthCacheTTL is how long a TokenReview or SubjectAccessReview answer is reused.
	DefaultAuthCacheTTL = 10 * time.Second
	// DefaultShutdownGrace is how long requests in flight are awaited at the stop.
	DefaultShutdownGrace = 15 * time.Second
)

// newFromConfig builds the gateway on an informer cache (not started), a client acting as the gateway and one
// acting as its callers (ImpersonatingConfig).
func newFromConfig(ctx context.Context, cfg *rest.Config, o RunOptions) (*Gateway, cache.Cache, error) {
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme.Scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, nil, fmt.Errorf("cache: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	callers, err := client.New(ImpersonatingConfig(cfg), client.Options{Scheme: scheme.Scheme, Mapper: c.RESTMapper()})
	if err != nil {
		return nil, nil, fmt.Errorf("client acting as callers: %w", err)
	}
	g, err := New(ctx, c, callers, ca, o.Options)
	if err != nil {
		return nil, nil, err
	}
	return g, ca, nil
}

// serve listens on the API, metrics and probe addresses until ctx ends, a server fails or the cache stops
// (cacheErr), then shuts the servers down within o.ShutdownGrace.
func serve(ctx context.Context, g *Gateway, o RunOptions, tlsCfg *tls.Config, cacheErr <-chan error) error {
	servers, listeners, err := listenAll(ctx, g, o, tlsCfg)
	if err != nil {
		return err
	}
	errs := make(chan error, len(servers))
	for i, s := range servers {
		go func() {
			if err := s.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
	}
	var metricsAddr net.Addr
	if len(listeners) > 1 && o.MetricsBindAddress != "" && o.MetricsBindAddress != "0" {
		metricsAddr = listeners[1].Addr()
	}
	o.Log.Info("Gateway serving", "address", listeners[0].Addr().String(), "tls", tlsCfg != nil,
		"metricsAddress", fmt.Sprint(metricsAddr))
	if o.Ready != nil {
		o.Ready(listeners[0].Addr(), metricsAddr)
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
	case runErr = <-cacheErr:
	}
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownGrace)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	return runErr
}

// listenAll opens the API listener (TLS unless insecure), the metrics listener and the probe listener when
// their addresses are set, with a server for each, in that order.
func listenAll(ctx context.Context, g *Gateway, o RunOptions, tlsCfg *tls.Config) ([]*http.Server, []net.Listener, error) {
	listen := func(addr string, secure bool) (net.Listener, error) {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", addr, err)
		}
		if secure && tlsCfg != nil {
			l = tls.NewListener(l, tlsCfg)
		}
		return l, nil
	}
	newServer := func(h http.Handler, writeTimeout time.Duration) *http.Server {
		return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: writeTimeout, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	}
	var servers []*http.Server
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	for _, e := range []struct {
		addr    string
		secure  bool
		handler http.Handler
		write   time.Duration
	}{
		{o.BindAddress, true, g.Handler(), o.MaxWaitOrDefault() + 30*time.Second},
		{o.MetricsBindAddress, true, g.metricsHandler(o.Metrics), 30 * time.Second},
		{o.ProbeAddress, false, http.HandlerFunc(g.probe), 10 * time.Second},
	} {
		if len(servers) > 0 && (e.addr == "" || e.addr == "0") {
			continue
		}
		l, err := listen(e.addr, e.secure)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		servers, listeners = append(servers, newServer(e.handler, e.write)), append(listeners, l)
	}
	return servers, listeners, nil
}

// serverTLS returns the listeners' TLS configuration (nil with Insecure, which it allows on loopback only).
func serverTLS(ctx context.Context, o RunOptions) (*tls.Config, error) {
	if o.Insecure {
		host, _, err := net.SplitHostPort(o.BindAddress)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("--insecure-listen serves plain HTTP and needs a loopback bind address (e.g. "+
				"127.0.0.1:9443), not %q", o.BindAddress)
		}
		return nil, nil
	}
	if o.TLSCertFile == "" || o.TLSKeyFile == "" {
		return nil, errors.New("--tls-cert-file and --tls-key-file are required (or --insecure-listen for a local test)")
	}
	cw, err := certwatcher.New(o.TLSCertFile, o.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	go func() {
		if err := cw.Start(ctx); err != nil {
			o.Log.Error(err, "Certificate watcher stopped")
		}
	}()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate, NextProtos: []string{"http/1.1"}}
	if o.EnableHTTP2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	return cfg, nil
}

// MaxWaitOrDefault is MaxWait, or DefaultMaxWait when unset.
func (o Options) MaxWaitOrDefault() time.Duration {
	if o.MaxWait > 0 {
		return o.MaxWait
	}
	return DefaultMaxWait
}

// metricsHandler serves /metrics to callers allowed "get" on the non-resource URL /metrics (as the manager's
// metrics endpoint does with controller-runtime's filters).
func (g *Gateway) metricsHandler(m *Metrics) http.Handler {
	mh := m.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		u, ok := g.authenticate(w, r)
		if !ok {
			return
		}
		d, _, err := g.opts.Authorizer.Authorize(r.Context(), authorizer.AttributesRecord{
			User: u, Verb: "get", Path: "/metrics"})
		if d != authorizer.DecisionAllow {
			if err != nil {
				g.opts.Log.Error(err, "Authorization check failed", "path", "/metrics")
			}
			writeProblem(w, problem(http.StatusForbidden, "forbidden", "forbidden",
				fmt.Sprintf("user %q may not get /metrics", u.GetName())))
			return
		}
		mh.ServeHTTP(w, r)
	})
}
