/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command actionledger is the actionledger manager. "actionledger fingerprint -f actions.yaml" prints the
// fingerprint the controller computes for each ExternalAction of a manifest.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"time"

	// Import all Kubernetes client auth plugins (e.g. Azure, GCP, OIDC, etc.)
	"k8s.io/apimachinery/pkg/api/resource"
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/controller"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/membudget"
	"github.com/actionledger/actionledger/internal/tracing"
	"github.com/actionledger/actionledger/internal/writeseats"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "fingerprint" {
		os.Exit(fingerprintCmd(os.Args[2:], os.Stdin, os.Stdout, os.Stderr, stdinIsTerminal))
	}
	if len(os.Args) > 1 && os.Args[1] == "gateway" {
		os.Exit(gatewayCmd(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "uninstall" {
		os.Exit(uninstallCmd(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(run())
}

// managerFlags are the manager's command-line flags.
type managerFlags struct {
	metricsAddr, probeAddr, pprofAddr, leNamespace   string
	controllerNS                                     string
	secureMetrics, leaderElect, enableHTTP2          bool
	insecureSkipVerifyAllowed, requireServiceAccount bool
	defaultServiceAccount                            string
	events                                           string
	qps                                              float64
	burst, concurrency                               int
	claimMargin                                      time.Duration
	maxInFlight, evaluationSlots, statusWriteSeats   int
	contendedReconciles, dominantReconciles          int
	memoryBudget                                     int64
	evaluationCPU                                    string
	collectionRate                                   float64
	shutdownGrace                                    time.Duration
	tombstoneStore, tombstoneDSNFile                 string
	watchSelector, leaderElectionID                  string
	egress                                           egress.Config
	zap                                              zap.Options
}

// bindServing defines the flags of the manager's own endpoints, its API client and leader election.
func (f *managerFlags) bindServing(fs *flag.FlagSet) {
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to, "+
		"e.g. :8443 (HTTPS) or :8080 (HTTP with --metrics-secure=false). 0 disables it.")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "0", "The address Go's /debug/pprof endpoints bind to, over "+
		"plain HTTP without authentication (for profiling, on a trusted address such as 127.0.0.1:6060). 0 disables it.")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "Enable leader election: only one manager sends at a time.")
	fs.StringVar(&f.leNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease (default: the pod's namespace).")
	fs.StringVar(&f.controllerNS, "controller-namespace", envOr("POD_NAMESPACE", "actionledger-system"),
		"Namespace whose Secrets ClusterDestinations may read.")
	fs.BoolVar(&f.secureMetrics, "metrics-secure", true,
		"Serve metrics over HTTPS with authentication and authorization.")
	fs.BoolVar(&f.enableHTTP2, "enable-http2", false, "Enable HTTP/2 for the metrics server.")
	fs.Float64Var(&f.qps, "kube-api-qps", 200,
		"Queries per second to the Kubernetes API server (client-go's default of 20 throttles status writes).")
	fs.IntVar(&f.burst, "kube-api-burst", 400, "Burst of queries to the Kubernetes API server.")
	fs.StringVar(&f.watchSelector, "watch-label-selector", "", "Run as one shard: watch and send only the "+
		"ExternalActions matching this label selector, e.g. 'sharding.actionledger.dev/key in (shard2)' (the "+
		"shard that also takes unlabeled actions: 'sharding.actionledger.dev/key notin (shard2)'; every action "+
		"must match exactly one shard). Each shard elects its own leader and shares every "+
		"destination's limits with the other shards (docs/sharding.md). Empty: one manager for everything.")
	fs.StringVar(&f.leaderElectionID, "leader-election-id", "", "Name of the leader election Lease (default "+
		app.DefaultLeaderElectionID+", plus a hash of --watch-label-selector when set).")
	fs.StringVar(&f.tombstoneStore, "tombstone-store", "objects", "Where tombstones are kept: objects "+
		"(ActionTombstone objects in the API server) or postgres (a PostgreSQL table; docs/tombstones.md).")
	fs.StringVar(&f.tombstoneDSNFile, "tombstone-store-dsn-file", "", "With --tombstone-store=postgres: a file "+
		"holding the PostgreSQL DSN (e.g. postgres://user:password@host:5432/db?sslmode=verify-full), such as a "+
		"mounted Secret. The DSN is never logged.")
	f.zap = zap.Options{Development: false}
	f.zap.BindFlags(fs)
}

// bindSending defines the flags of how actions are sent: concurrency, claims, egress, TLS and Events.
func (f *managerFlags) bindSending(fs *flag.FlagSet) {
	fs.IntVar(&f.concurrency, "max-concurrent-reconciles", controller.DefaultMaxConcurrentReconciles,
		"ExternalActions reconciled (and sent) in parallel.")
	fs.DurationVar(&f.claimMargin, "claim-margin", ledger.DefaultClaimMargin,
		"Added to a destination's timeout to form a claim's expiry.")
	fs.IntVar(&f.maxInFlight, "max-in-flight", dispatch.DefaultGlobalMaxInFlight,
		"Requests in flight to all destinations at once (each destination also has spec.concurrency.maxInFlight). "+
			"Sends do not hold reconcile workers.")
	fs.IntVar(&f.contendedReconciles, "contended-reconciles", 0, "ExternalAction reconciles one namespace may "+
		"have at once while another namespace has had a request within the last second; the rest of its requests wait "+
		"in its own backlog. A namespace alone has every worker (--max-concurrent-reconciles) (docs/security.md). 0: "+
		"half the workers.")
	fs.IntVar(&f.dominantReconciles, "dominant-reconciles", 0, "ExternalAction reconciles the dominant namespace may "+
		"have at once while another namespace has had a request within the last second: the one whose reconciles took "+
		"over half a worker and over twice the worker time of every other namespace with requests, averaged over 5 s; "+
		"it stays so while it takes the most (docs/security.md). At most --contended-reconciles, which turns it off. "+
		"0: an eighth of the workers.")
	fs.IntVar(&f.statusWriteSeats, "status-write-seats", writeseats.DefaultPerNamespace, "ExternalAction status "+
		"writes (claims and outcomes) one namespace may have at the API server at once while another namespace has written "+
		"within the last second; its others wait, first come first served, and another namespace's never wait behind "+
		"them. A namespace writing alone is not bounded (docs/security.md). 0: the default; negative: no bound.")
	fs.IntVar(&f.evaluationSlots, "evaluation-slots", 0, "Expressions (successWhen, outputs, post-checks) evaluated "+
		"at once; the others wait for a slot, served to the namespace that used the least slot time (docs/security.md). "+
		"A quick successWhen or post-check (no comprehension, no matches, estimated cost at most 1,000) takes no slot. "+
		"0: half of GOMAXPROCS (at least 1), which follows the container's CPU limit (the node's core count without one). "+
		"Slotted evaluations run on threads at background priority (nice 10).")
	fs.StringVar(&f.evaluationCPU, "evaluation-cpu", "", "The CPU that slotted evaluations may use on average, in "+
		"cores as a Kubernetes quantity (250m, 0.5, 1): a slot whose evaluations used more stays taken until the "+
		"budget has accrued again (docs/security.md). Empty or 0: half a core per evaluation slot.")
	fs.Int64Var(&f.memoryBudget, "memory-budget", 0, "Bytes that tenants' traffic may make the manager hold at once: "+
		"the evaluations' heaps (--evaluation-slots times 16 MiB, at most half; the slots are cut to fit), then the "+
		"bodies of the sends in flight and the windows of decoders, one namespace at most half of those. A send whose "+
		"bytes do not fit waits before it is sent; a decoder window that does not fit is not opened and the body is "+
		"recorded undecoded (docs/security.md). 0: a quarter of the container's memory limit (at least 48 MiB), "+
		"256 MiB without one.")
	fs.Float64Var(&f.collectionRate, "collection-rate", controller.DefaultCollectionRate,
		"Collections a second (deletes of finished actions past ttlAfterFinished, and their finalization) that take "+
			"their turn among waiting sends; beyond it collection runs only when no send waits. 0: always behind the sends.")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", dispatch.DefaultShutdownGrace,
		"On SIGTERM or loss of leadership: how long requests in flight are awaited and their outcomes recorded; "+
			"what is still open then is left claimed (DESIGN rule 3 after a restart). Keep it below the pod's "+
			"terminationGracePeriodSeconds minus 10s.")
	cidrsFlag(&f.egress.Allow, strings.TrimPrefix(egress.FlagAllow, "--"), "Comma-separated CIDRs that destinations "+
		"may reach although the default egress deny set (loopback, link-local/cloud metadata, unspecified, multicast, "+
		"the API server's addresses) contains them; the most specific prefix decides (docs/security.md). "+
		"Repeatable. Example: 127.0.0.1/32 for a destination on this machine.")
	cidrsFlag(&f.egress.Deny, strings.TrimPrefix(egress.FlagDeny, "--"), "Comma-separated CIDRs that destinations "+
		"may not reach, in addition to the default deny set; at equal prefix length they win over "+
		egress.FlagAllow+". Repeatable. Example: 10.0.0.0/8,fd00::/8.")
	fs.StringVar(&f.events, "events", "important", "Which Events to emit: important (warnings, terminal phases other "+
		"than Succeeded, replays from a tombstone, decisions by people, waits) or all (also one per success).")
	fs.BoolVar(&f.insecureSkipVerifyAllowed, "insecure-skip-verify-allowed", false,
		"Let namespaced Destinations turn TLS verification off (spec.tls.insecureSkipVerify). Without it such a "+
			"Destination is not Ready (reason InsecureSkipVerifyNotAllowed) and nothing is sent to it; "+
			"ClusterDestinations may always.")
	fs.StringVar(&f.defaultServiceAccount, "default-service-account", "", "The ServiceAccount (a name, in the "+
		"Destination's namespace) whose rights read the Secrets of a Destination without spec.serviceAccountName, "+
		"by impersonation. Empty: such a Destination's Secrets are read with the manager's rights.")
	fs.BoolVar(&f.requireServiceAccount, "require-service-account", false, "Refuse a Destination whose Secrets would "+
		"be read with the manager's rights (no spec.serviceAccountName and no --default-service-account): reason "+
		"SecretNotAllowed, nothing is sent. For multi-tenant installs. ClusterDestinations are not affected.")
}

// options are the app.Options of the parsed flags.
func (f *managerFlags) options() app.Options {
	var tlsOpts []func(*tls.Config)
	if !f.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	ms := metricsserver.Options{BindAddress: f.metricsAddr, SecureServing: f.secureMetrics, TLSOpts: tlsOpts}
	if f.secureMetrics {
		ms.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return app.Options{
		MetricsServer: &ms, ProbeAddr: f.probeAddr, PprofAddr: f.pprofAddr,
		LeaderElection: f.leaderElect, LeaderElectionNamespace: f.leNamespace,
		ControllerNamespace: f.controllerNS, MaxConcurrentReconciles: f.concurrency, ClaimMargin: f.claimMargin,
		MaxInFlight: f.maxInFlight, StatusWriteSeats: f.statusWriteSeats,
		ContendedReconciles: f.contendedReconciles, DominantReconciles: f.dominantReconciles, ShutdownGrace: f.shutdownGrace,
		CollectionRate:            &f.collectionRate,
		Egress:                    &f.egress,
		InsecureSkipVerifyAllowed: f.insecureSkipVerifyAllowed,
		DefaultServiceAccount:     f.defaultServiceAccount,
		RequireServiceAccount:     f.requireServiceAccount,
		AllEvents:                 f.events == "all",
		TombstoneStore:            f.tombstoneStore,
		TombstoneStoreDSNFile:     f.tombstoneDSNFile,
		WatchLabelSelector:        f.watchSelector,
		LeaderElectionID:          f.leaderElectionID,
	}
}

func run() int {
	f := &managerFlags{}
	f.bindServing(flag.CommandLine)
	f.bindSending(flag.CommandLine)
	flag.Usage = func() {
		out := flag.CommandLine.Output()
		_, _ = fmt.Fprintf(out, "Usage:\n"+
			"  %[1]s [flags]                     run the manager\n"+
			"  %[1]s fingerprint -f action.yaml  print NAME FINGERPRINT for each ExternalAction in a manifest\n"+
			"  %[1]s gateway [flags]             run the HTTP gateway (docs/gateway.md; -h lists its flags)\n"+
			"  %[1]s uninstall [flags]           stop the manager and release the actions' finalizers (docs/uninstall.md)\n"+
			"\nFlags:\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	setupLog := ctrl.Log.WithName("setup")
	if f.events != "important" && f.events != "all" {
		setupLog.Error(fmt.Errorf("--events=%q: want important or all", f.events), "Invalid flag")
		return 2
	}
	if !setTenantBudgets(f, setupLog) {
		return 2
	}
	tuneGC(setupLog)
	stopTracing, err := startTracing("actionledger", setupLog)
	if err != nil {
		return 1
	}
	defer stopTracing()
	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(f.qps), f.burst
	// The manager runs beside its API server (in the cluster, or on the machine of make run-local): gzip on that
	// link costs both ends CPU and saves nothing worth it (client-go's rest.Config.DisableCompression, made for
	// clients on fast networks). Without it the API server compresses the manager's watch streams and large lists.
	cfg.DisableCompression = true
	mgr, err := app.New(cfg, f.options())
	if err != nil {
		setupLog.Error(err, "Failed to set up the manager")
		return 1
	}
	setupLog.Info("Starting manager", "version", version, "commit", commit,
		"leaderElection", f.leaderElect, "qps", f.qps, "burst", f.burst, "concurrency", f.concurrency,
		"maxInFlight", f.maxInFlight, "collectionRate", f.collectionRate, "shutdownGrace", f.shutdownGrace,
		"watchLabelSelector", f.watchSelector,
		"egressAllow", f.egress.Allow, "egressDeny", f.egress.Deny, "tombstoneStore", f.tombstoneStore)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "Failed to run manager")
		return 1
	}
	return 0
}

// cidrsFlag defines a repeatable flag of comma-separated CIDRs appended to *dst; a bad entry stops the
// manager at start with a message naming it (see egress.ParseCIDRs).
func cidrsFlag(dst *[]netip.Prefix, name, usage string) {
	flag.Func(name, usage, func(s string) error {
		p, err := egress.ParseCIDRs(s)
		if err != nil {
			return err
		}
		*dst = append(*dst, p...)
		return nil
	})
}

// tracingFlushTimeout bounds the export of the spans still buffered when the process stops.
const tracingFlushTimeout = 5 * time.Second

// startTracing installs the OTLP (or console) exporter when the standard OTEL_* variables ask for one
// (internal/tracing, docs/tracing.md); without them tracing is off and costs nothing. The returned function
// flushes the spans still buffered.
func startTracing(service string, log logr.Logger) (func(), error) {
	shutdown, err := tracing.Setenv(context.Background(), service)
	if err != nil {
		log.Error(err, "Failed to set up tracing from the OTEL_* environment variables")
		return nil, err
	}
	if tracing.Enabled() {
		log.Info("Tracing enabled", "exporter", tracing.Exporter(os.Getenv))
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Error(err, "Failed to flush the last spans")
		}
	}, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// parseCores reads --evaluation-cpu: a Kubernetes quantity of cores (250m, 0.5, 1), or "" for 0 (the default).
// A negative or unparsable value is an error naming the flag.
func parseCores(v string) (float64, error) {
	if v == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, fmt.Errorf("--evaluation-cpu=%q: %w", v, err)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("--evaluation-cpu=%q: want a quantity of cores of at least 0", v)
	}
	return float64(q.MilliValue()) / 1000, nil
}

// setTenantBudgets sets what tenants' traffic may make the manager spend, from the flags: the memory budget
// (--memory-budget), the evaluation slots that fit in it (--evaluation-slots) and their CPU (--evaluation-cpu).
// It reports false, having logged why, for a flag it cannot read.
func setTenantBudgets(f *managerFlags, setupLog logr.Logger) bool {
	total := f.memoryBudget
	if total < 1 {
		total = membudget.TotalFromMemoryLimit()
	}
	cores, err := parseCores(f.evaluationCPU)
	if err != nil {
		setupLog.Error(err, "Invalid flag")
		return false
	}
	expr.SetSlots(f.evaluationSlots)
	slots, rest := membudget.Split(total, expr.Slots(), expr.HeapBound)
	if slots != expr.Slots() {
		setupLog.Info("Fewer evaluation slots than asked: the memory budget holds the heaps of these only",
			"asked", expr.Slots(), "slots", slots, "memoryBudget", total)
		expr.SetSlots(slots)
	}
	expr.SetCores(cores)
	httpexec.SetBudget(membudget.New(rest))
	setupLog.Info("Tenant budgets", "memoryBudget", total, "evaluationSlots", slots, "evaluationCores", expr.Cores(),
		"evaluationHeapBytes", int64(slots)*expr.HeapBound, "bodyAndWindowBytes", rest)
	return true
}

// gcPercent is the garbage collector's target (GOGC) when the environment sets none: the heap may grow to three
// times what is live between collections instead of twice, which halves the collections for a steady live heap
// (what it saves of the manager's CPU, a few per cent at most, is in docs/benchmarks.md). The soft memory limit
// set beside it keeps that growth inside the container.
const gcPercent = 200

// tuneGC sets the Go runtime's soft memory limit (GOMEMLIMIT) to 90 % of the container's memory limit (cgroup
// v2 memory.max or v1 memory.limit_in_bytes, read by github.com/KimMachineGun/automemlimit), and GOGC to
// gcPercent. An environment that sets GOMEMLIMIT or GOGC keeps its own value (AUTOMEMLIMIT=off also leaves the
// limit alone); without a container limit no soft limit is set. Near the soft limit the collector runs as often
// as it must, so the larger GOGC never takes the heap past the container's limit while what is live fits in it.
func tuneGC(l logr.Logger) {
	gogc := os.Getenv("GOGC")
	if gogc == "" {
		debug.SetGCPercent(gcPercent)
		gogc = fmt.Sprint(gcPercent)
	}
	limit, err := memlimit.Set(memlimit.WithRatio(0.9), memlimit.WithProvider(memlimit.FromCgroup))
	if err != nil { // not in a cgroup, or not on Linux: the runtime's default (no soft limit) stays
		l.Info("Garbage collector: no container memory limit was read; GOMEMLIMIT is not set",
			"GOGC", gogc, "reason", err.Error())
		return
	}
	l.Info("Garbage collector", "GOGC", gogc, "GOMEMLIMIT", limit)
}
