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

// Package controller holds the reconcilers. The ExternalAction reconciler is a thin loop: it records an outcome
// it holds first (DESIGN rule 2), then observes the action through an ordered list of gates into one facts
// value (gates.go), lets the ledger decide one step, and hands that step to the status writer
// (internal/status) and, for a claim, the send to the dispatcher (DESIGN rules 1 and 10). Features live in
// their own packages and are called at named points: destination resolution and auth (internal/destination),
// the send itself (internal/send), spec.outputs (internal/outputs), spec.subject (internal/subject) and the
// tombstone stores (internal/tombstone). docs/design.md has the map.
package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/deadletter"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/fairqueue"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/outputs"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/send"
	"github.com/actionledger/actionledger/internal/shard"
	"github.com/actionledger/actionledger/internal/status"
	"github.com/actionledger/actionledger/internal/subject"
	"github.com/actionledger/actionledger/internal/tombstone"
	"github.com/actionledger/actionledger/internal/tombstone/objects"
	"github.com/actionledger/actionledger/internal/waitroom"
	"github.com/actionledger/actionledger/internal/writeseats"
)

// DefaultMaxConcurrentReconciles is the number of parallel reconciles when Options.MaxConcurrentReconciles is
// not positive (and the default of the manager's --max-concurrent-reconciles flag).
const DefaultMaxConcurrentReconciles = 16

// Options are the ExternalAction reconciler's settings and optional collaborators; the zero value works.
type Options struct {
	// Holder identifies this manager process in claims: host or pod name plus a per-process nonce.
	Holder string
	// ControllerNamespace is where ClusterDestinations read their Secrets.
	ControllerNamespace string
	// ClaimMargin is added to a destination's timeout to form a claim's expiry; not positive means
	// ledger.DefaultClaimMargin.
	ClaimMargin time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles; not positive means DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// Rand returns a number in [0, 1) for jitter; nil uses math/rand/v2.
	Rand func() float64
	// AllEvents emits an Event for every success too (manager flag --events=all). By default a plain success
	// emits none: Events are for what a person needs (warnings, terminal phases other than Succeeded, replays
	// from a tombstone, decisions by people, waits), and one Event per success is an API write per action.
	AllEvents bool
	// InsecureSkipVerifyAllowed lets namespaced Destinations turn TLS verification off (manager flag
	// --insecure-skip-verify-allowed); ClusterDestinations may always.
	InsecureSkipVerifyAllowed bool
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool
	// CollectionRate is how many collections a second (the delete of a finished action past its expiresAt, or
	// the finalization of a finished action being deleted) take their turn among waiting sends
	// (--collection-rate); beyond it collection runs only when no send waits (CollectPriority). nil means
	// DefaultCollectionRate; 0 puts every collection behind the sends.
	CollectionRate *float64
	// MaxInFlight bounds the sends in flight of the whole manager (--max-in-flight); not positive means
	// dispatch.DefaultGlobalMaxInFlight.
	MaxInFlight int
	// StatusWriteSeats bounds the status writes one namespace has at the API server at once
	// (--status-write-seats, internal/writeseats); 0 means writeseats.DefaultPerNamespace, negative no bound.
	StatusWriteSeats int
	// ContendedReconciles bounds the reconciles one namespace has at once while another namespace has requests
	// (--contended-reconciles, internal/fairqueue); not positive means half the workers (at least 1), and it is
	// at most the number of workers.
	ContendedReconciles int
	// DominantReconciles bounds, while another namespace has requests, the reconciles of the dominant namespace,
	// the one that has taken more than twice the worker time of every other (--dominant-reconciles,
	// fairqueue.Shares); not positive means an eighth of the workers (at least 1), and it is at most
	// ContendedReconciles.
	DominantReconciles int
	// ShutdownGrace is how long sends in flight are awaited after the stop began (--shutdown-grace); not
	// positive means dispatch.DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Tombstones proves a new key has no tombstone without a read (nil: always read live). It serves the
	// default store (ActionTombstone objects) when TombstoneStore is nil.
	Tombstones *objects.Index
	// TombstoneStore keeps tombstones (DESIGN rules 6-8); nil means ActionTombstone objects.
	TombstoneStore tombstone.Store
	// Tokens caches the OAuth2 access tokens of destinations with spec.auth.oauth2, in memory only. nil: made on
	// first use from Executor's TokenClient (so the egress policy applies to token endpoints too).
	Tokens *httpexec.TokenCache
	// Shards divides each destination's limits among the shards that use it (--watch-label-selector); nil
	// without sharding: every limit is this manager's alone.
	Shards *shard.Membership
	// Tenants reads a namespaced Destination's Secrets with the rights of a ServiceAccount of its namespace
	// (--default-service-account, --require-service-account); nil: with the manager's (APIReader).
	Tenants *destination.TenantSecrets
}

// ExternalActionReconciler reconciles ExternalAction objects.
type ExternalActionReconciler struct {
	client.Client
	// APIReader reads from the API server directly (tombstones, Secrets, fresh copies after a conflict).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  recorder.EventRecorder
	Clock     clock.PassiveClock
	Executor  httpexec.Executor
	Limiter   *limiter.Registry
	Exprs     *expr.Cache
	Options   Options
	// Dispatcher runs claimed sends outside the reconcile workers (DESIGN rule 10). Required: the manager's
	// wiring passes NewManagerDispatcher's; a test that drives Reconcile directly passes an InlineDispatcher.
	Dispatcher Dispatcher

	once  sync.Once
	parts *parts
}

// parts are the reconciler's collaborators, built once from its fields (build).
type parts struct {
	// room parks sends that wait for room at their destination until a completion there wakes them.
	room *waitroom.Room
	// passage is what every request to a destination passes before its claim (send.Passage).
	passage  *send.Passage
	writer   *status.Writer
	resolver *destination.Resolver
	sender   *send.Sender
	outputs  *outputs.Manager
	subjects *subject.Lock
	store    tombstone.Store
	health   *storeHealth
	mailbox  *mailbox
	// deadletter delivers the dead-letter records of terminal actions (spec.deadLetter of their destination).
	deadletter *deadletter.Manager
	// collector runs collection behind sends (collect.go).
	collector *collector
	// wakeFn enqueues an object from outside a reconcile (the manager's dispatcher's outcomes channel); nil
	// without one (a test's inline dispatcher): then only the requeue looks again.
	wakeFn func(types.NamespacedName)
}

// sooner moves the wakes of retries waiting for a retry budget whose budget comes sooner than they were told
// (first attempts raised it, or the retries ahead went sooner): the limiter hands them over
// (limiter.Registry.WakesEarly) and the room moves their wake (waitroom.Room.Sooner).
func (p *parts) sooner(ws []limiter.Wake) {
	for _, w := range ws {
		ns, name, _ := strings.Cut(w.Key, "/")
		p.room.Sooner(types.NamespacedName{Namespace: ns, Name: name}, w.Dest, w.At)
	}
}

// wake enqueues nn (wakeFn), when there is a way to.
func (p *parts) wake(nn types.NamespacedName) {
	if p.wakeFn != nil {
		p.wakeFn(nn)
	}
}

// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=externalactions,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=externalactions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=externalactions/finalizers,verbs=update
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=destinations;clusterdestinations,verbs=get;list;watch
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=destinations/status;clusterdestinations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=actiontombstones,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;impersonate
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile moves one ExternalAction forward by at most one attempt.
func (r *ExternalActionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.once.Do(r.build)
	start := r.Clock.Now()
	defer func() { metrics.ReconciliationDuration.Observe(r.Clock.Since(start).Seconds()) }()

	nn := req.NamespacedName
	xa := &actionsv1alpha1.ExternalAction{}
	if err := r.Get(ctx, nn, xa); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if moved, err := r.movedAway(ctx, nn, xa); err != nil || !moved {
			if err == nil {
				r.forget(nn)
			}
			return ctrl.Result{}, err
		}
	}
	// Collection runs behind every waiting send (collect.go): each reconcile takes the turn a previous one handed
	// it, whatever it goes on to do.
	armed := r.parts.collector.take(nn)

	// DESIGN rule 2: an outcome we hold but could not write comes first; nothing else is decided before it.
	if p, ok := r.parts.mailbox.load(nn); ok {
		return r.settle(ctx, xa, p)
	}
	// An attempt of this process is still in the dispatcher: its outcome is on its way (deliver stores it in the
	// mailbox, then wakes this object; the mailbox is read above, so a wake that comes while this reconcile runs
	// finds it on the next). Nothing is decided, claimed or sent meanwhile, even past the claim's expiry, and
	// nothing polls: requeue.Held is a safety net.
	if r.Dispatcher.Holds(nn) {
		log.FromContext(ctx).V(1).Info("an attempt is in flight in the dispatcher; waiting for its outcome")
		return ctrl.Result{RequeueAfter: requeue.Held}, nil
	}
	// The cache is behind the outcome of an unclaimed attempt this manager wrote: wait for it (its watch event
	// wakes the object), since no claim would stop a second send.
	if r.parts.mailbox.behind(xa) {
		log.FromContext(ctx).V(1).Info("the cache is behind a recorded outcome; waiting for it")
		return ctrl.Result{RequeueAfter: requeue.InFlight}, nil
	}
	if !xa.DeletionTimestamp.IsZero() {
		return r.finalizeInTurn(ctx, xa, armed)
	}
	if !controllerutil.ContainsFinalizer(xa, actionsv1alpha1.Finalizer) {
		controllerutil.AddFinalizer(xa, actionsv1alpha1.Finalizer)
		if err := r.Update(ctx, xa); err != nil {
			return ctrl.Result{}, ignoreConflict(err)
		}
	}
	if xa.Status.Phase.Terminal() {
		return r.reconcileTerminal(ctx, xa, armed)
	}
	return r.reconcileActive(ctx, xa)
}

// finalizeInTurn finalizes xa, being deleted: a finished action's finalization is collection work and waits for
// its turn behind the sends (collector.turn); any other is finalized at once.
func (r *ExternalActionReconciler) finalizeInTurn(ctx context.Context, xa *actionsv1alpha1.ExternalAction, armed bool) (ctrl.Result, error) {
	if finishedDeletion(xa) {
		release, res, ok := r.parts.collector.turn(client.ObjectKeyFromObject(xa), armed)
		if !ok {
			return res, nil
		}
		defer release()
	}
	return r.finalize(ctx, xa)
}

// forget drops what this manager holds for an object that is gone (deleted, or relabeled out of this shard):
// its pending outcome, its output values (not while its send is out: the values are held before the outcome
// reaches the mailbox), its subject wait and its place in the rate limiter's queue (at once, so that the keys
// behind it do not wait for its grace to end).
func (r *ExternalActionReconciler) forget(nn types.NamespacedName) {
	r.parts.mailbox.drop(nn)
	r.parts.mailbox.forgetWritten(nn)
	r.parts.collector.take(nn)
	r.Limiter.ForgetKey(nn.Namespace + "/" + nn.Name)
	if !r.Dispatcher.Holds(nn) {
		r.parts.outputs.Forget(nn)
	}
	r.parts.subjects.Forget(nn)
	r.parts.room.Leave(nn)
	expr.DropSlot(nn.Namespace, nn.String())
}

// movedAway reports whether an object that the cache does not hold, but whose outcome or output values this
// manager holds, still exists: it was relabeled out of this shard's --watch-label-selector while its attempt
// was in flight, or before its outputs were written. Then xa is its live copy and the outcome is recorded,
// and the outputs written, on it all the same (DESIGN rule 2); the shard that now owns it takes over from
// there. Output values held for another object of the same name (an older UID) do not count.
func (r *ExternalActionReconciler) movedAway(ctx context.Context, nn types.NamespacedName, xa *actionsv1alpha1.ExternalAction) (bool, error) {
	_, pending := r.parts.mailbox.load(nn)
	holds, _ := r.parts.outputs.Holds(nn, "")
	if !pending && !holds {
		return false, nil
	}
	if err := r.APIReader.Get(ctx, nn, xa); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading %s, whose outcome or outputs are held, from the API server: %w", nn, err)
	}
	_, same := r.parts.outputs.Holds(nn, xa.UID)
	return pending || same, nil
}

// reconcileTerminal handles the subject release, outputs, decisions by people, new generations and garbage
// collection of finished actions, in that order. armed says that a previous reconcile handed this one the
// collection's turn at CollectPriority (collector.take); otherwise the collection goes now only within
// Options.CollectionRate (collector.turn).
func (r *ExternalActionReconciler) reconcileTerminal(ctx context.Context, xa *actionsv1alpha1.ExternalAction, armed bool) (ctrl.Result, error) {
	now := r.Clock.Now()
	// A finished holder gives its subject up (again, should the release after its outcome have failed).
	if xa.Spec.Subject != "" && subject.Releasable(xa) {
		if err := r.parts.subjects.Release(ctx, xa); err != nil {
			return ctrl.Result{}, err
		}
	}
	// spec.outputs are settled before anything else of a Succeeded action, and before it can be collected.
	if xa.Spec.Outputs != nil && xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
		if res, done, err := r.parts.outputs.Reconcile(ctx, xa); done {
			return res, err
		}
	}
	if decision, ok := xa.Annotations[actionsv1alpha1.AnnotationResolve]; ok {
		return r.resolve(ctx, xa, decision)
	}
	if xa.Status.ObservedGeneration != xa.Generation {
		return r.observeFinished(ctx, xa)
	}
	// A dead-letter record owed is delivered, or given up, before the action can be collected.
	if res, done, err := r.parts.deadletter.Reconcile(ctx, xa); done {
		return res, err
	}
	if xa.Status.ExpiresAt != nil && xa.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown {
		if left := xa.Status.ExpiresAt.Sub(now); left > 0 {
			return dueAt(left), nil
		}
		release, res, ok := r.parts.collector.turn(client.ObjectKeyFromObject(xa), armed)
		if !ok {
			return res, nil
		}
		defer release()
		return r.collect(ctx, xa)
	}
	return ctrl.Result{}, nil
}

// build makes the reconciler's parts from its fields (Clock, Exprs, Limiter and Dispatcher are required: the
// manager's wiring passes them, and so does every test): the status writer, and the features, each handed the
// writer.
func (r *ExternalActionReconciler) build() {
	if d, ok := r.Dispatcher.(*InlineDispatcher); ok && d.Deliver == nil {
		d.Deliver = func(c dispatch.Completion[*send.Result]) { r.receive(c) }
	}
	p := &parts{mailbox: newMailbox(), health: &storeHealth{}, collector: newCollector(r.Options.workers(), r.Options.collectionRate()),
		room: waitroom.New()}
	p.subjects = &subject.Lock{Client: r.Client, APIReader: r.APIReader, Clock: r.Clock}
	p.writer = &status.Writer{Client: r.Client, Reader: r.APIReader, Recorder: r.Recorder, Clock: r.Clock,
		AllEvents: r.Options.AllEvents, DestinationID: destination.ID, Seats: writeseats.New(r.Options.statusWriteSeats()),
		Finished: func(xa *actionsv1alpha1.ExternalAction) {
			r.Limiter.Forget(destination.ID(xa), xa.Namespace+"/"+xa.Name)
			p.room.Leave(types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name})
			p.subjects.ReleaseAfterWrite(xa)
		}}
	p.resolver = &destination.Resolver{Client: r.Client, Secrets: r.APIReader, Tenants: r.Options.Tenants,
		ControllerNamespace:       r.Options.ControllerNamespace,
		InsecureSkipVerifyAllowed: r.Options.InsecureSkipVerifyAllowed, Shards: r.Options.Shards, Tokens: r.Options.Tokens,
		Executor: r.Executor, Clock: r.Clock}
	p.outputs = &outputs.Manager{Client: r.Client, APIReader: r.APIReader, Scheme: r.Scheme, Exprs: r.Exprs, Clock: r.Clock,
		Writer: p.writer, Sharded: r.Options.Shards != nil, Wake: p.wake, Env: func(xa *actionsv1alpha1.ExternalAction) ledger.Env {
			return r.env(xa, nil, r.Clock.Now())
		}}
	p.sender = &send.Sender{Executor: r.Executor, Exprs: r.Exprs, Clock: r.Clock, Succeeded: p.outputs.Hold}
	p.passage = &send.Passage{Limiter: r.Limiter, Resolver: p.resolver, Room: p.room,
		HasRoom: func(id, ns string) bool { return r.Dispatcher.HasRoom(id, ns) },
		Load:    func(id string) (int, int) { return r.Dispatcher.InFlight(id), r.Dispatcher.Queued(id) }}
	p.deadletter = &deadletter.Manager{Reader: r.APIReader, Resolver: p.resolver, Writer: p.writer, Sender: p.sender,
		Clock:   r.Clock,
		Env:     func(xa *actionsv1alpha1.ExternalAction) ledger.Env { return r.env(xa, nil, r.Clock.Now()) },
		Submit:  r.submit,
		Passage: p.passage}
	// The write that ends an action records the dead-letter record it owes (docs/deadletter.md).
	p.writer.Terminal = p.deadletter.Owe
	p.store = r.Options.TombstoneStore
	if p.store == nil {
		p.store = &objects.Store{Client: r.Client, Reader: r.APIReader, Index: r.Options.Tombstones}
	}
	r.parts = p
}

// workers is the number of parallel reconciles (Options.MaxConcurrentReconciles or its default).
func (o *Options) workers() int {
	if o.MaxConcurrentReconciles <= 0 {
		return DefaultMaxConcurrentReconciles
	}
	return o.MaxConcurrentReconciles
}

// collectionRate is Options.CollectionRate, or DefaultCollectionRate when it is not set (negative means 0).
func (o *Options) collectionRate() float64 {
	if o.CollectionRate == nil {
		return DefaultCollectionRate
	}
	return max(0, *o.CollectionRate)
}

// contendedReconciles is Options.ContendedReconciles, or half of workers (at least 1) when it is not positive,
// at most workers.
func (o *Options) contendedReconciles(workers int) int {
	if o.ContendedReconciles <= 0 {
		return max(workers/2, 1)
	}
	return min(o.ContendedReconciles, workers)
}

// shares is the fair queue's shares of workers (a number of reconciles each, fairqueue.Shares).
func (o *Options) shares(workers int) fairqueue.Shares {
	contended := o.contendedReconciles(workers)
	return fairqueue.Shares{Alone: workers, Contended: contended, Dominant: o.dominantReconciles(workers, contended)}
}

// dominantReconciles is Options.DominantReconciles, or an eighth of workers (at least 1) when it is not
// positive, at most contended.
func (o *Options) dominantReconciles(workers, contended int) int {
	if o.DominantReconciles <= 0 {
		return min(max(workers/8, 1), contended)
	}
	return min(o.DominantReconciles, contended)
}

// statusWriteSeats is Options.StatusWriteSeats, or writeseats.DefaultPerNamespace when it is 0 (negative: 0,
// no bound).
func (o *Options) statusWriteSeats() int {
	if o.StatusWriteSeats == 0 {
		return writeseats.DefaultPerNamespace
	}
	return max(0, o.StatusWriteSeats)
}

// rand is the jitter source.
func (o *Options) rand() func() float64 {
	if o.Rand != nil {
		return o.Rand
	}
	return rand.Float64
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// SetupWithManager sets up the controller with the Manager: the dispatcher (started with the manager, only on
// the leader), the cache indexes and the watches.
func (r *ExternalActionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Dispatcher == nil {
		return errors.New("the ExternalAction reconciler has no dispatcher (NewManagerDispatcher)")
	}
	md, isManagers := r.Dispatcher.(*ManagerDispatcher)
	if isManagers {
		if err := mgr.Add(md); err != nil {
			return fmt.Errorf("adding the dispatcher: %w", err)
		}
	}
	r.once.Do(r.build)
	if err := subject.Index(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := IndexDestinationRef(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing actions by destination: %w", err)
	}
	workers := r.Options.workers()
	b := ctrl.NewControllerManagedBy(mgr).For(&actionsv1alpha1.ExternalAction{})
	if isManagers {
		// Outcomes handed back by the dispatcher wake their object (DESIGN rule 10), and so does the waiting room
		// when a parked action's time comes (a token, the retry budget, a pause's end, the shard's share).
		b = b.WatchesRawSource(source.Channel(md.outcomes, &handler.EnqueueRequestForObject{}))
		r.parts.wakeFn = func(nn types.NamespacedName) { md.wakeUp(nn) }
		clk, _ := r.Clock.(clock.WithDelayedExecution)
		r.parts.room.Wakes(clk, r.parts.wakeFn)
		r.Limiter.WakesEarly(r.parts.sooner)
	}
	return b.
		// spec.subject: a holder that finishes, is resolved or goes wakes the other actions on its subject.
		Watches(&actionsv1alpha1.ExternalAction{}, handler.EnqueueRequestsFromMapFunc(r.parts.subjects.ActionsOnSameSubject),
			builder.WithPredicates(subject.Changed)).
		// A namespace's labels decide which ClusterDestinations its actions may use (spec.namespaceSelector):
		// metadata is all that is read, and a label change wakes the actions waiting on NamespaceNotAllowed.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(actionsUsingClusterDestinations(r.Client)),
			builder.OnlyMetadata, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// A destination created, fixed or validated again wakes the actions that reference it (ledger.Blocked).
		Watches(&actionsv1alpha1.Destination{}, handler.EnqueueRequestsFromMapFunc(actionsUsingDestination(r.Client))).
		Watches(&actionsv1alpha1.ClusterDestination{}, handler.EnqueueRequestsFromMapFunc(actionsUsingDestination(r.Client))).
		// spec.outputs: a written output deleted later is noticed (OutputMissing). Only metadata is watched, and the
		// manager's cache holds only objects labelled as outputs (outputs.CacheOptions).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(outputs.ActionOf), builder.OnlyMetadata).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(outputs.ActionOf), builder.OnlyMetadata).
		Named("externalaction").
		// Each reconcile's logger names the action once, as externalaction={name,namespace} (docs/concepts.md),
		// with namespace and name: one WithValues per reconcile, where controller-runtime's default constructor
		// adds the action twice more (its kind as a key, then namespace and name) and each With copies the encoder.
		WithLogConstructor(actionLogger(mgr.GetLogger().WithValues("controller", "externalaction",
			"controllerGroup", actionsv1alpha1.GroupVersion.Group, "controllerKind", "ExternalAction"))).
		// The workers are shared by every namespace: each gets a fair share of them (internal/fairqueue), all of
		// them alone, ContendedReconciles (half of them) while other namespaces have requests too, and
		// DominantReconciles (an eighth) then for the one namespace that dominates the workers' recent time.
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: workers, SkipNameValidation: &r.Options.SkipNameValidation,
			NewQueue: fairqueue.NewQueue(r.Options.shares(workers), func(o *priorityqueue.Opts[reconcile.Request]) {
				o.Log = mgr.GetLogger().WithValues("controller", "externalaction")
			})}).
		Complete(r)
}

// actionLogger is the ExternalAction controller's LogConstructor: base with the request's action as
// externalaction={name,namespace}, namespace and name, added in one WithValues.
func actionLogger(base logr.Logger) func(*reconcile.Request) logr.Logger {
	return func(req *reconcile.Request) logr.Logger {
		if req == nil {
			return base
		}
		return base.WithValues("externalaction", klog.KRef(req.Namespace, req.Name), "namespace", req.Namespace, "name", req.Name)
	}
}
