package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/actionledger/actionledger/internal/gateway"
)

// gatewayCmd runs "actionledger gateway": the HTTP front door with Idempotency-Key semantics (docs/gateway.md).
func gatewayCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o gateway.RunOptions
	var forward string
	var qps float64
	var burst int
	fs.StringVar(&o.BindAddress, "bind-address", ":9443", "The address the gateway listens on (HTTPS).")
	fs.StringVar(&o.ProbeAddress, "health-probe-bind-address", ":8081",
		"The address /healthz and /readyz listen on (plain HTTP, no authentication). 0 disables it.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", "The address /metrics listens on "+
		"(HTTPS, or HTTP with --insecure-listen; callers need get on the non-resource URL /metrics). 0 disables it.")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "Serving certificate (PEM), reloaded when the file changes.")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", "", "Serving key (PEM).")
	fs.BoolVar(&o.Insecure, "insecure-listen", false, "Serve plain HTTP (local tests only; "+
		"refused unless --bind-address is a loopback address).")
	fs.DurationVar(&o.DefaultWait, "default-wait", gateway.DefaultWait,
		"How long a new request waits for the outcome without a Prefer: wait header before answering 202.")
	fs.DurationVar(&o.MaxWait, "max-wait", gateway.DefaultMaxWait, "The largest Prefer: wait honoured.")
	fs.StringVar(&forward, "forward-headers", "", "Comma-separated request headers copied into the "+
		"ExternalAction's spec.request.headers (and so its fingerprint). Default none.")
	fs.DurationVar(&o.AuthCacheTTL, "auth-cache-ttl", gateway.DefaultAuthCacheTTL,
		"How long TokenReview and allowed SubjectAccessReview decisions are cached; denials a fifth of it.")
	fs.BoolVar(&o.EnableHTTP2, "enable-http2", false, "Offer HTTP/2 over TLS (off by default, as for the manager).")
	fs.DurationVar(&o.ShutdownGrace, "shutdown-grace", gateway.DefaultShutdownGrace,
		"How long open requests may finish on SIGTERM.")
	fs.Float64Var(&qps, "kube-api-qps", 100, "Queries per second to the Kubernetes API server.")
	fs.IntVar(&burst, "kube-api-burst", 200, "Burst of queries to the Kubernetes API server.")
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig (default: in-cluster, or $KUBECONFIG).")
	zo := zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for h := range strings.SplitSeq(forward, ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.ForwardHeaders = append(o.ForwardHeaders, h)
		}
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	o.Log = ctrl.Log.WithName("gateway")
	cfg, err := restConfig(*kubeconfig, qps, burst)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "actionledger gateway: %v\n", err)
		return 1
	}
	return runGateway(cfg, o)
}

// runGateway runs the gateway until a signal stops it, with tracing as the OTEL_* variables ask (docs/tracing.md).
func runGateway(cfg *rest.Config, o gateway.RunOptions) int {
	stopTracing, err := startTracing("actionledger-gateway", o.Log)
	if err != nil {
		return 1
	}
	defer stopTracing()
	o.Log.Info("Starting gateway", "version", version, "commit", commit)
	if err := gateway.Run(ctrl.SetupSignalHandler(), cfg, o); err != nil {
		o.Log.Error(err, "Gateway stopped")
		return 1
	}
	return 0
}

// restConfig is the API server configuration of kubeconfig (empty: in-cluster, or $KUBECONFIG) with the client's
// qps and burst.
func restConfig(kubeconfig string, qps float64, burst int) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = config.GetConfig()
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	return cfg, nil
}
