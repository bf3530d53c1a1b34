// Package app builds the actionledger manager: the reconcilers, their shared parts and the manager options.
// cmd/main.go and the integration tests use the same constructor, so tests exercise what ships.
package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/controller"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/outputs"
	"github.com/actionledger/actionledger/internal/scheme"
	"github.com/actionledger/actionledger/internal/shard"
	"github.com/actionledger/actionledger/internal/tombstone/objects"
	"github.com/actionledger/actionledger/internal/tombstone/postgres"
)

// Scheme holds the Kubernetes core types and actionledger's API (package scheme).
var Scheme = scheme.Scheme

// Options configure a manager.
type Options struct {
	// MetricsAddr is the metrics bind address ("0" disables).
	MetricsAddr string
	// MetricsServerOptions overrides the metrics server entirely when non-nil.
	MetricsServer *metricsserver.Options
	// ProbeAddr is the health probe bind address ("0" disables).
	ProbeAddr string
	// PprofAddr is the bind address of Go's /debug/pprof endpoints over plain HTTP, without authentication
	// (flag --pprof-bind-address; "" or "0" disables, the default). For profiling on a trusted address only.
	PprofAddr string
	// LeaderElection enables leader election (default on in cmd/main.go).
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; empty uses the in-cluster namespace.
	LeaderElectionNamespace string
	// ControllerNamespace is where ClusterDestinations read Secrets.
	ControllerNamespace string
	// MaxConcurrentReconciles bounds parallel ExternalAction reconciles (and parallel sends).
	MaxConcurrentReconciles int
	// ClaimMargin is added to a destination's timeout to form a claim's expiry.
	ClaimMargin time.Duration
	// MaxInFlight bounds the sends in flight of the whole manager (--max-in-flight, default 1024).
	MaxInFlight int
	// StatusWriteSeats bounds the status writes one namespace has at the API server at once
	// (--status-write-seats, default 4; 0: that default, negative: no bound).
	StatusWriteSeats int
	// ContendedReconciles bounds the reconciles one namespace has at once while another namespace has requests
	// (--contended-reconciles; 0: half the workers).
	ContendedReconciles int
	// DominantReconciles bounds, while another namespace has requests, the reconciles of the one namespace that
	// took more than twice the worker time of every other (--dominant-reconciles, fairqueue.Shares; 0: an eighth
	// of the workers).
	DominantReconciles int
	// CollectionRate is the collections a second that go in line with waiting sends (--collection-rate); nil:
	// controller.DefaultCollectionRate.
	CollectionRate *float64
	// ShutdownGrace is how long sends in flight are awaited and recorded after SIGTERM or a loss of
	// leadership (--shutdown-grace, default 25s); the manager's GracefulShutdownTimeout is this plus
	// ShutdownRecordTime.
	ShutdownGrace time.Duration
	// AllEvents emits an Event for every success too (flag --events=all); by default a plain success emits none.
	AllEvents bool
	// InsecureSkipVerifyAllowed lets namespaced Destinations turn TLS verification off (flag
	// --insecure-skip-verify-allowed, default false); ClusterDestinations may always.
	InsecureSkipVerifyAllowed bool
	// DefaultServiceAccount is the ServiceAccount (a name, in the Destination's namespace) whose rights read the
	// Secrets of a Destination without spec.serviceAccountName (flag --default-service-account; "" none).
	DefaultServiceAccount string
	// RequireServiceAccount refuses a Destination whose Secrets would be read with the manager's own rights (no
	// spec.serviceAccountName, no DefaultServiceAccount): flag --require-service-account, for multi-tenant installs.
	RequireServiceAccount bool
	// Holder overrides the claim holder identity (default: hostname + "_" + random nonce).
	Holder string
	// Clock overrides the clock (tests).
	Clock clock.Clock
	// Egress is the admin's egress policy (cmd/main.go: --destination-allow-cidrs, --destination-deny-cidrs);
	// nil means the default deny set only. The API server's addresses are added to it (see
	// apiServerAddresses). It applies to the executor built here and to the destination validator.
	Egress *egress.Config
	// Executor overrides the HTTP executor (tests); it then enforces its own egress policy.
	Executor httpexec.Executor
	// SkipNameValidation allows several managers in one process (tests only).
	SkipNameValidation bool
	// TombstoneStore is where tombstones are kept (--tombstone-store): "objects" (ActionTombstones, the
	// default when empty) or "postgres" (docs/tombstones.md).
	TombstoneStore string
	// TombstoneStoreDSNFile is a file holding the PostgreSQL DSN (--tombstone-store-dsn-file, e.g. a mounted
	// Secret); TombstoneStoreDSN, when set, is used instead (tests). Neither is ever logged.
	TombstoneStoreDSNFile string
	TombstoneStoreDSN     string
	// Postgres tunes the PostgreSQL store (tests: expiry interval).
	Postgres postgres.Options
	// WatchLabelSelector (--watch-label-selector, a label selector as kubectl -l takes it) makes this manager one
	// shard: it watches and sends only the ExternalActions it matches, takes the leader-election ID
	// ShardLeaderElectionID unless LeaderElectionID is set, and shares every destination's limits with the
	// other shards (package shard, docs/sharding.md). Empty: one manager for everything, nothing shared.
	WatchLabelSelector string
	// LeaderElectionID overrides the leader-election Lease name (--leader-election-id).
	LeaderElectionID string
	// ShardNamespace holds the shard member Leases; empty uses LeaderElectionNamespace, then ControllerNamespace.
	ShardNamespace string
	// ShardInterval and ShardLeaseDuration override shard.DefaultInterval and shard.DefaultLeaseDuration (tests).
	ShardInterval, ShardLeaseDuration time.Duration
	// Logger is the manager's logger: its controllers (with every reconcile's log and controller-runtime's
	// "Reconciler error") and the PostgreSQL tombstone store log through it. Zero: ctrl.Log, as cmd/main.go
	// sets it up (tests pass one to read a manager's log).
	Logger logr.Logger
}

// DefaultLeaderElectionID is the leader-election Lease name of a manager without --watch-label-selector.
const DefaultLeaderElectionID = "actionledger.actions.actionledger.dev"

// ShardLeaderElectionID returns the leader-election ID of the shard watching selector: DefaultLeaderElectionID
// and the first 8 hex digits of the selector's SHA-256 (as Flux derives one per shard), so that each shard
// elects its own leader. The selector is hashed as given: two spellings of one selector are two shards.
func ShardLeaderElectionID(selector string) string {
	sum := sha256.Sum256([]byte(selector))
	return DefaultLeaderElectionID + "-" + hex.EncodeToString(sum[:4])
}

// ShutdownRecordTime is what the manager's graceful shutdown allows beyond ShutdownGrace to record the
// outcomes of the last sends and stop everything else.
const ShutdownRecordTime = 10 * time.Second

// PodNameEnv is the environment variable holding the pod's name (the downward API's metadata.name, set by
// config/manager and the Helm chart); NewHolder prefers it to the host name.
const PodNameEnv = "POD_NAME"

// NewHolder returns "<pod name>_<8 random hex>": a new identity for each process start, so a restarted
// process never mistakes an old claim for its own. The pod's name comes from $POD_NAME; without it the host
// name is used, which in a pod is the pod's name except on the node's network (hostNetwork: true), where
// every replica would name the node instead.
func NewHolder() string {
	host := os.Getenv(PodNameEnv)
	if host == "" {
		var err error
		if host, err = os.Hostname(); err != nil || host == "" {
			host = "actionledger"
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "_" + hex.EncodeToString(b[:])
}

// shardOf parses o.WatchLabelSelector (nil: not sharded) and returns the leader-election ID to use.
func shardOf(o Options) (labels.Selector, string, error) {
	var sel labels.Selector
	leID := o.LeaderElectionID
	if o.WatchLabelSelector != "" {
		var err error
		if sel, err = labels.Parse(o.WatchLabelSelector); err != nil {
			return nil, "", fmt.Errorf("parsing --watch-label-selector %q: %w", o.WatchLabelSelector, err)
		}
		if leID == "" {
			leID = ShardLeaderElectionID(o.WatchLabelSelector)
		}
	}
	if leID == "" {
		leID = DefaultLeaderElectionID
	}
	return sel, leID, nil
}

// addMembership adds this shard's member Lease loop to mgr (package shard). With leader election the shard's
// leader, whoever it is, renews one Lease named after leID; without it every process is its own member.
func addMembership(mgr ctrl.Manager, o Options, leID, holder string, clk clock.PassiveClock) (*shard.Membership, error) {
	memberID := holder
	if o.LeaderElection {
		memberID = leID
	}
	ns := o.ShardNamespace
	if ns == "" {
		ns = o.LeaderElectionNamespace
	}
	if ns == "" {
		ns = o.ControllerNamespace
	}
	m := &shard.Membership{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: ns,
		Name: shard.MemberName(memberID), Holder: holder, Interval: o.ShardInterval,
		LeaseDuration: o.ShardLeaseDuration, Clock: clk}
	if err := mgr.Add(m); err != nil {
		return nil, fmt.Errorf("adding the shard membership: %w", err)
	}
	return m, nil
}

// clockOf is o.Clock, or the real clock when it is nil.
func clockOf(o Options) clock.Clock {
	if o.Clock == nil {
		return clock.RealClock{}
	}
	return o.Clock
}

// New builds a manager with every actionledger controller registered.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	watchSelector, leID, err := shardOf(o)
	if err != nil {
		return nil, err
	}
	if sa := o.DefaultServiceAccount; sa != "" {
		if msgs := validation.IsDNS1123Subdomain(sa); len(msgs) > 0 {
			return nil, fmt.Errorf("--default-service-account %q is not a ServiceAccount name: %s", sa, strings.Join(msgs, "; "))
		}
	}
	// The tombstone index learns of every (re)list of the ExternalAction informer through its ListerWatcher.
	// A shard does without it: its informer sees only its own shard's deletions, so it cannot prove that a key
	// deleted in another shard left no tombstone; tombstones are global and every first send reads one live.
	var tombstones *objects.Index
	if watchSelector == nil {
		tombstones = objects.NewIndex(nil)
	}
	mgr, err := newManager(cfg, o, watchSelector, leID, tombstones)
	if err != nil {
		return nil, err
	}
	clk := clockOf(o)
	exec, tokens, policy, err := executor(mgr, cfg, o)
	if err != nil {
		return nil, err
	}
	holder := o.Holder
	if holder == "" {
		holder = NewHolder()
	}
	if err := feedTombstoneIndex(mgr, tombstones); err != nil {
		return nil, err
	}
	var shards *shard.Membership
	if watchSelector != nil {
		if shards, err = addMembership(mgr, o, leID, holder, clk); err != nil {
			return nil, err
		}
	}
	store, err := newTombstoneStore(mgr, o, tombstones, clk)
	if err != nil {
		return nil, err
	}
	opts := controller.Options{
		Holder: holder, ControllerNamespace: o.ControllerNamespace, ClaimMargin: o.ClaimMargin,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles, MaxInFlight: o.MaxInFlight, StatusWriteSeats: o.StatusWriteSeats,
		ContendedReconciles: o.ContendedReconciles, DominantReconciles: o.DominantReconciles,
		ShutdownGrace: shutdownGrace(o), CollectionRate: o.CollectionRate,
		InsecureSkipVerifyAllowed: o.InsecureSkipVerifyAllowed, AllEvents: o.AllEvents, SkipNameValidation: o.SkipNameValidation,
		Tombstones: tombstones, TombstoneStore: store, Tokens: tokens, Shards: shards,
		Tenants: &destination.TenantSecrets{Config: cfg, Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
			DefaultServiceAccount: o.DefaultServiceAccount, Required: o.RequireServiceAccount},
	}
	if err := addControllers(mgr, o, opts, clk, exec, policy); err != nil {
		return nil, err
	}
	return mgr, nil
}

// pprofAddr is addr, with "" meaning "0" (controller-runtime's value that disables the endpoint).
func pprofAddr(addr string) string {
	if addr == "" {
		return "0"
	}
	return addr
}

// shutdownGrace is o.ShutdownGrace or its default.
func shutdownGrace(o Options) time.Duration {
	if o.ShutdownGrace <= 0 {
		return dispatch.DefaultShutdownGrace
	}
	return o.ShutdownGrace
}

// newManager creates the controller-runtime manager: metrics and probe addresses, leader election, and the cache
// (managedFields stripped, finished actions trimmed, a shard's label selector, the tombstone index's relist hook).
func newManager(cfg *rest.Config, o Options, watchSelector labels.Selector, leID string, tombstones *objects.Index) (ctrl.Manager, error) {
	metrics := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsServer != nil {
		metrics = *o.MetricsServer
	}
	if o.MetricsAddr == "" && o.MetricsServer == nil {
		metrics.BindAddress = "0"
	}
	probe := o.ProbeAddr
	if probe == "" {
		probe = "0"
	}
	shutdownTimeout := shutdownGrace(o) + ShutdownRecordTime
	lock, err := leaderLock(cfg, o, leID)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        Scheme,
		GracefulShutdownTimeout:       &shutdownTimeout,
		Metrics:                       metrics,
		HealthProbeBindAddress:        probe,
		PprofBindAddress:              pprofAddr(o.PprofAddr),
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              leID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// The Lease names the pod (leaderLock); nil: controller-runtime's lock.
		LeaderElectionResourceLockInterface: lock,
		Logger:                              o.Logger,
		Cache: cache.Options{
			// Keep managedFields out of the cache: they are most of an object's size and never read.
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject:         cacheByObject(watchSelector),
			NewInformer: func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration,
				idx toolscache.Indexers) toolscache.SharedIndexInformer {
				if _, ok := obj.(*actionsv1alpha1.ExternalAction); ok && tombstones != nil {
					lw = tombstones.RelistHook(lw)
				}
				return toolscache.NewSharedIndexInformer(lw, obj, resync, idx)
			},
		},
		Client: client.Options{Cache: &client.CacheOptions{}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// executor returns the executor of sends (o.Executor, else an HTTPExecutor with the egress policy), the one
// OAuth2 token cache (its token requests go through an HTTPExecutor's transports, so the egress policy applies
// to token endpoints) and the egress policy, whose refresher of the API server's addresses it adds to mgr.
func executor(mgr ctrl.Manager, cfg *rest.Config, o Options) (httpexec.Executor, *httpexec.TokenCache, *egress.Policy, error) {
	var egressCfg egress.Config
	if o.Egress != nil {
		egressCfg = *o.Egress
	}
	policy := egress.New(egressCfg)
	apiAddrs := &apiServerAddresses{policy: policy, reader: mgr.GetAPIReader(), host: cfg.Host,
		resolver: net.DefaultResolver, interval: APIServerRefreshInterval, log: ctrl.Log.WithName("egress")}
	apiAddrs.refresh(context.Background()) // before anything can be sent
	if err := mgr.Add(apiAddrs); err != nil {
		return nil, nil, nil, fmt.Errorf("adding the API server address refresher: %w", err)
	}
	exec := o.Executor
	if exec == nil {
		exec = httpexec.New(httpexec.WithEgressPolicy(policy))
	}
	tokenExec, ok := exec.(*httpexec.HTTPExecutor)
	if !ok {
		tokenExec = httpexec.New(httpexec.WithEgressPolicy(policy))
	}
	// One token cache: the senders take tokens from it, the destination validator forgets a deleted destination's.
	return exec, httpexec.NewTokenCache(tokenExec.TokenClient), policy, nil
}

// addControllers registers the ExternalAction controller, the destination validators, the tombstone collector,
// the gauge updater and the health checks.
func addControllers(mgr ctrl.Manager, o Options, opts controller.Options, clk clock.Clock, exec httpexec.Executor,
	policy *egress.Policy) error {
	r := &controller.ExternalActionReconciler{
		Client:    controller.GuardTrimmed(mgr.GetClient()),
		APIReader: mgr.GetAPIReader(),
		Scheme:    mgr.GetScheme(),
		Recorder:  mgr.GetEventRecorder("actionledger"),
		Clock:     clk,
		Executor:  exec,
		Limiter:   limiter.NewRegistry(),
		Exprs:     expr.NewCache(expr.DefaultCacheSize),
		Options:   opts,
	}
	d, err := controller.NewManagerDispatcher(r)
	if err != nil {
		return err
	}
	r.Dispatcher = d
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the ExternalAction controller: %w", err)
	}
	for _, cluster := range []bool{false, true} {
		if err := (&controller.DestinationReconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ControllerNamespace: o.ControllerNamespace,
			Exprs: expr.NewCache(64), Egress: policy, Cluster: cluster, InsecureSkipVerifyAllowed: o.InsecureSkipVerifyAllowed,
			SkipNameValidation: o.SkipNameValidation, Tokens: opts.Tokens, Tenants: opts.Tenants,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the destination validator: %w", err)
		}
	}
	if err := (&controller.TombstoneReconciler{Client: mgr.GetClient(), Clock: clk, SkipNameValidation: o.SkipNameValidation}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the tombstone collector: %w", err)
	}
	if err := controller.IndexPhase(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing ExternalActions by phase: %w", err)
	}
	if err := mgr.Add(&controller.GaugeUpdater{Client: mgr.GetClient(), Interval: GaugeInterval}); err != nil {
		return fmt.Errorf("adding the gauge updater: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding ready check: %w", err)
	}
	return nil
}

// GaugeInterval is how often the OutcomeUnknown and subject gauges are recounted from the cache.
const GaugeInterval = 15 * time.Second

// cacheByObject is the manager's per-kind cache configuration.
func cacheByObject(watchSelector labels.Selector) map[client.Object]cache.ByObject {
	by := map[client.Object]cache.ByObject{
		// Finished actions are cached without their history and response body (they are most of the
		// cache at scale); the reconciler's client refuses to write from such a copy (GuardTrimmed). A
		// shard sees only the actions its selector matches (nil: all); Destinations, ClusterDestinations
		// and tombstones are not sharded.
		&actionsv1alpha1.ExternalAction{}: {Transform: controller.TrimFinished, Label: watchSelector},
	}
	// Secrets and ConfigMaps: only the metadata of the objects written for spec.outputs.
	maps.Copy(by, outputs.CacheOptions())
	return by
}

// feedTombstoneIndex gives the tombstone index (nil: none, a shard) its live reader and the ExternalAction
// informer's events (the deletions it must see).
func feedTombstoneIndex(mgr ctrl.Manager, tombstones *objects.Index) error {
	if tombstones == nil {
		return nil
	}
	tombstones.Reader = mgr.GetAPIReader()
	xaInformer, err := mgr.GetCache().GetInformer(context.Background(), &actionsv1alpha1.ExternalAction{})
	if err != nil {
		return fmt.Errorf("getting the ExternalAction informer: %w", err)
	}
	if _, err := xaInformer.AddEventHandler(tombstones.Handler()); err != nil {
		return fmt.Errorf("adding the tombstone index's event handler: %w", err)
	}
	return nil
}
