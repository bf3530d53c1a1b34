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

// Package controller holds the reconcilers: thin glue that reads an object, asks the ledger state machine
// what to do, writes status (claims as an optimistic-concurrency Update, DESIGN rule 1), sends, records and
// requeues from the schedule stored in status.
package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/internal/shard"
	"github.com/actionledger/actionledger/internal/tombstone"
)

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
	// Holder identifies this manager process in claims: host or pod name plus a per-process nonce.
	Holder string
	// ControllerNamespace is where ClusterDestinations read their Secrets.
	ControllerNamespace string
	// ClaimMargin is added to a destination's timeout to form a claim's expiry. Default 5s.
	ClaimMargin time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (and so parallel sends).
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
	// MaxInFlight bounds the sends in flight of the whole manager (--max-in-flight); not positive means
	// dispatch.DefaultGlobalMaxInFlight.
	MaxInFlight int
	// ShutdownGrace is how long sends in flight are awaited after the stop began (--shutdown-grace); not
	// positive means dispatch.DefaultShutdownGrace.
	ShutdownGrace time.Duration
	// Dispatcher runs claimed sends outside the reconcile workers (DESIGN rule 10). SetupWithManager creates
	// it; without one (a reconciler driven directly by a test) each send runs inline in its reconcile.
	Dispatcher *dispatch.Dispatcher[*pendingOutcome]
	// Tombstones proves a new key has no tombstone without a read (nil: always read live; see checkTombstone).
	// It serves the default store (ActionTombstone objects) when TombstoneStore is nil.
	Tombstones *TombstoneIndex
	// Tokens caches the OAuth2 access tokens of destinations with spec.auth.oauth2, in memory only. nil: made on
	// first use from Executor's TokenClient (so the egress policy applies to token endpoints too).
	Tokens   *httpexec.TokenCache
	tokensMu sync.Mutex
	// TombstoneStore keeps tombstones (DESIGN rules 6-8); nil means ActionTombstone objects (ObjectStore over
	// Client, APIReader and Tombstones).
	TombstoneStore tombstone.Store
	// Shards divides each destination's limits among the shards that use it (--watch-label-selector); nil
	// without sharding: every limit is this manager's alone.
	Shards *shard.Membership

	// pending holds outcomes not yet written (DESIGN rule 2): handed back by the dispatcher, or kept after a
	// failed write. Recorded before anything else is decided, never re-sent.
	pending sync.Map // types.NamespacedName -> *pendingOutcome
	// outcomes wakes the controller for an object whose outcome is pending (a source.Channel).
	outcomes chan event.GenericEvent
	// stopped is closed when the manager stops: completions are then recorded directly.
	stopped chan struct{}
	// outputs holds the values of spec.outputs taken from a successful response until the target is written
	// (outputs.go); they are kept nowhere else.
	outputs sync.Map // types.NamespacedName -> *heldOutputs
	// subjectWaits holds when this manager first saw an action wait for its spec.subject (wait-time metric).
	subjectWaits sync.Map // types.NamespacedName -> time.Time
}

// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=externalactions,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=externalactions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=externalactions/finalizers,verbs=update
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=destinations;clusterdestinations,verbs=get;list;watch
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=destinations/status;clusterdestinations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=actions.actionledger.dev,resources=actiontombstones,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile moves one ExternalAction forward by at most one attempt.
func (r *ExternalActionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	start := r.Clock.Now()
	defer func() { metrics.ReconciliationDuration.Observe(r.Clock.Since(start).Seconds()) }()

	xa := &actionsv1alpha1.ExternalAction{}
	if err := r.Get(ctx, req.NamespacedName, xa); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if moved, err := r.movedAway(ctx, req.NamespacedName, xa); err != nil || !moved {
			if err == nil {
				r.pending.Delete(req.NamespacedName) // the object is gone: there is nothing left to record on
				if r.Dispatcher == nil || !r.Dispatcher.Holds(req.NamespacedName) {
					// Not while its send is out: the values are held before the outcome reaches r.pending.
					r.outputs.Delete(req.NamespacedName)
				}
				r.subjectWaits.Delete(req.NamespacedName)
			}
			return ctrl.Result{}, err
		}
	}
	logger := log.FromContext(ctx).WithValues("externalaction", klog.KObj(xa))
	ctx = log.IntoContext(ctx, logger)

	// DESIGN rule 2: an outcome we hold but could not write comes first; nothing else is decided before it.
	// record itself finalizes an object being deleted when the outcome cannot be written (DESIGN rule 8).
	if v, ok := r.pending.Load(req.NamespacedName); ok {
		p := v.(*pendingOutcome)
		if p.check != nil {
			p.env.Now = r.Clock.Now()
			return r.recordCheck(ctx, xa, p)
		}
		return r.record(ctx, xa, p.attempt, p.outcome, p.env)
	}

	// An attempt of this process is still in the dispatcher: its outcome is on its way (deliver stores it, then
	// wakes this object). Nothing is decided, claimed or sent meanwhile, even past the claim's expiry.
	if r.Dispatcher != nil && r.Dispatcher.Holds(req.NamespacedName) {
		logger.V(1).Info("an attempt is in flight in the dispatcher; waiting for its outcome")
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
	}

	if !xa.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, xa)
	}
	if !controllerutil.ContainsFinalizer(xa, actionsv1alpha1.Finalizer) {
		controllerutil.AddFinalizer(xa, actionsv1alpha1.Finalizer)
		if err := r.Update(ctx, xa); err != nil {
			return ctrl.Result{}, ignoreConflict(err)
		}
	}

	if xa.Status.Phase.Terminal() {
		return r.reconcileTerminal(ctx, xa)
	}
	return r.reconcileActive(ctx, xa)
}

// reconcileActive handles Pending and InProgress actions: validate, bind the fingerprint, then advance.
func (r *ExternalActionReconciler) reconcileActive(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	now := r.Clock.Now()
	env := r.envFor(xa, nil, retry.Policy{}, 0, now)

	fp, err := fingerprint.Compute(&xa.Spec)
	if err != nil {
		return r.apply(ctx, xa, ledger.Fail(&xa.Status, actionsv1alpha1.ReasonInvalidSpec, err.Error(), env), "")
	}
	// DESIGN rule 6: the key is bound to the fingerprint stored at the first claim.
	if xa.Status.Fingerprint != "" && xa.Status.Fingerprint != fp && xa.Status.Claim == nil {
		metrics.FingerprintConflicts.Inc()
		return r.apply(ctx, xa, ledger.Conflict(&xa.Status, conflictMessage(xa, xa.Status.Fingerprint, fp, "this object's first attempt"), env), "")
	}

	dest, err := r.resolveDestination(ctx, xa)
	if err == nil {
		err = dest.notReady()
	}
	if err != nil {
		return r.waitOnDestination(ctx, xa, err, env)
	}
	// A destination usable again ends a stall (ledger.Blocked): the next status written carries it (unstall).
	// xa.Status itself stays as stored, so that a send refused again (loadCredentials) finds the same stall and
	// writes nothing.
	unblocked := ledger.Unblock(&xa.Status, env)
	staleErr := xa.Status.LastError
	// The destination's retention applies to an action failed for an invalid spec too (else it is collected at once).
	env = r.envFor(xa, dest, dest.Policy, dest.DeadlineDur, now)
	policy, deadlineDur, body, err := r.checkSpec(xa, dest)
	if err != nil {
		return r.apply(ctx, xa, ledger.Fail(&xa.Status, actionsv1alpha1.ReasonInvalidSpec, err.Error(), env), dest.ID)
	}
	env = r.envFor(xa, dest, policy, deadlineDur, now)
	key := idempotencyKey(dest.Spec, xa.Namespace, xa.Name)

	if xa.Status.Fingerprint == "" {
		// First sight of this key: a tombstone binds it beyond the object's life (DESIGN rule 7).
		if step, done, err := r.checkTombstone(ctx, xa, key, fp, env); err != nil || done {
			if unknown := (*errTombstoneStore)(nil); errors.As(err, &unknown) {
				return r.waitOnTombstoneStore(ctx, xa, unknown, env)
			}
			if err != nil {
				return ctrl.Result{}, err
			}
			return r.apply(ctx, xa, unstall(step, unblocked, staleErr), dest.ID)
		}
		xa.Status = *ledger.Begin(&xa.Status, key, fp, env)
	}

	step := unstall(ledger.Advance(&xa.Status, env), unblocked, staleErr)
	switch step.Kind {
	case ledger.KindSend:
		// DESIGN rule 11: the path never leaves the destination's base path (the base was checked on resolving).
		// Checked here, where no claim is open, so that an uncertain attempt is never dropped by the refusal.
		target, err := httpexec.JoinURL(dest.Spec.URL, xa.Spec.Request.Path)
		if err != nil {
			msg := fmt.Sprintf("spec.request.path: %v; nothing was sent. Use a path without \".\" or \"..\" segments "+
				"(in any encoding), encoded \"/\" or backslashes", err)
			return r.apply(ctx, xa, ledger.Fail(&xa.Status, actionsv1alpha1.ReasonPathOutsideBase, msg, env), dest.ID)
		}
		return r.claimAndSend(ctx, xa, dest, step, target, body, env)
	case ledger.KindPostCheck:
		return r.postCheck(ctx, xa, dest, step, env)
	default:
		return r.apply(ctx, xa, step, dest.ID)
	}
}

// movedAway reports whether an object that the cache does not hold, but whose outcome (r.pending) or output
// values (r.outputs) this manager holds, still exists: it was relabeled out of this shard's
// --watch-label-selector while its attempt was in flight, or before its outputs were written. Then xa is its
// live copy and the outcome is recorded, and the outputs written, on it all the same (DESIGN rule 2); the
// shard that now owns it takes over from there. Output values held for another object of the same name (an
// older UID) do not count.
func (r *ExternalActionReconciler) movedAway(ctx context.Context, nn types.NamespacedName, xa *actionsv1alpha1.ExternalAction) (bool, error) {
	_, pending := r.pending.Load(nn)
	held, holds := r.outputs.Load(nn)
	if (!pending && !holds) || r.APIReader == nil {
		return false, nil
	}
	if err := r.APIReader.Get(ctx, nn, xa); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading %s, whose outcome or outputs are held, from the API server: %w", nn, err)
	}
	return pending || held.(*heldOutputs).uid == xa.UID, nil
}

// claimAndSend waits for room at the destination, reads its credentials, takes a token from its limits,
// writes the claim (DESIGN rule 1) and only then hands the send to the dispatcher (DESIGN rule 10).
func (r *ExternalActionReconciler) claimAndSend(ctx context.Context, xa *actionsv1alpha1.ExternalAction, dest *resolvedDestination,
	step ledger.Step, target string, body []byte, env ledger.Env) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	attempt := step.Status.Claim.Attempt
	// spec.subject: the action must hold its subject's Lease before any claim; otherwise it waits, sending nothing.
	if xa.Spec.Subject != "" && r.APIReader != nil {
		if held, res, err := r.holdSubject(ctx, xa, env); !held {
			return res, err
		}
	}
	if wait, ok := r.takeShare(dest, env.Now); !ok {
		// This shard is joining the destination's shared limits (a few seconds after a start, or its first use
		// of the destination): a short internal wait, not worth a status write per action.
		logger.V(1).Info("waiting for this shard's share of the destination's limits", "destination", dest.ID, "wait", wait)
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if r.Dispatcher != nil && !r.Dispatcher.HasRoom(dest.ID, xa.Namespace) {
		return r.waitForRoom(ctx, xa, dest, env) // before Admit: no token is spent
	}
	// spec.outputs: an object in the target's place that this action did not write holds the send back.
	if err := r.checkOutputTarget(ctx, xa); err != nil {
		return r.waitOnOutputTarget(ctx, xa, err, env)
	}
	// Secrets are read only right before a send (and a post-check), never to decide anything else.
	if err := r.loadCredentials(ctx, dest); err != nil {
		return r.waitOnDestination(ctx, xa, err, env)
	}
	key := xa.Namespace + "/" + xa.Name
	ok, wait, reason := r.Limiter.Admit(dest.ID, dest.Limits, xa.Namespace, key, attempt == 1, env.Now)
	if !ok {
		wait = r.shareRecheck(dest, wait)
		apiReason := limiterReason(reason)
		metrics.Delayed.WithLabelValues(dest.ID, apiReason).Inc()
		until := env.Now.Add(wait)
		msg := fmt.Sprintf("waiting for destination %s (%s) until %s", dest.ID, apiReason, until.UTC().Format(time.RFC3339Nano))
		return r.apply(ctx, xa, ledger.Delayed(&xa.Status, apiReason, msg, until, env), dest.ID)
	}

	claimed := xa.DeepCopy()
	claimed.Status = *step.Status
	if err := r.updateStatus(ctx, claimed); err != nil {
		// A Conflict means the decision was based on a stale copy (C01) or another holder moved first: send nothing.
		if apierrors.IsConflict(err) {
			logger.V(1).Info("claim lost to a newer version; nothing sent", "attempt", attempt)
			return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
		}
		if errors.Is(err, errStatusRefused) {
			return ctrl.Result{}, r.refused(claimed, fmt.Sprintf("the claim of attempt %d", attempt), err)
		}
		return ctrl.Result{}, fmt.Errorf("writing the claim of attempt %d: %w", attempt, err)
	}
	if attempt > 1 {
		metrics.Retries.WithLabelValues(dest.ID).Inc()
	}
	if claimed.Status.Phase != xa.Status.Phase {
		logPhaseChange(ctx, claimed, xa.Status.Phase, dest.ID)
	}
	logger.V(1).Info("claimed; dispatching", "attempt", attempt, "destination", dest.ID)
	return r.dispatchSend(ctx, claimed, r.sendJob(claimed, dest, target, body, env))
}

// record writes the outcome of attempt (DESIGN rule 2): re-reading from the API server on a Conflict or when
// the copy at hand does not show the attempt open (the cache may lag behind the claim), and retrying the write
// with statusWriteBackoff. It never sends. The outcome stays in memory (r.pending) until it is written, or the
// API server shows the attempt settled elsewhere or the object gone; after the backoff's last step the error
// is returned and the workqueue retries. An outcome the API server refuses as Invalid is written without the
// destination's values (updateStatus); if even that is refused it is dropped with a Warning Event rather than
// retried forever. An object being deleted is finalized with the outcome in memory when it cannot be
// written, so its tombstone carries it (DESIGN rules 2 and 8).
func (r *ExternalActionReconciler) record(ctx context.Context, cur *actionsv1alpha1.ExternalAction, attempt int32,
	outcome ledger.Outcome, env ledger.Env) (ctrl.Result, error) {
	nn := types.NamespacedName{Namespace: cur.Namespace, Name: cur.Name}
	r.pending.Store(nn, &pendingOutcome{attempt: attempt, outcome: outcome, env: env})
	backoff := statusWriteBackoff
	fresh := false
	var err error
	for try := 0; ; try++ {
		step, ok := ledger.Record(&cur.Status, attempt, outcome, env)
		if !ok && fresh {
			r.pending.Delete(nn)
			r.outputs.Delete(nn)
			log.FromContext(ctx).Info("outcome dropped: the attempt is no longer open (resolved elsewhere)", "attempt", attempt, "result", outcome.Class)
			return ctrl.Result{}, nil
		}
		if ok {
			upd := cur.DeepCopy()
			upd.Status = *step.Status
			if err = r.updateStatus(ctx, upd); err == nil {
				r.pending.Delete(nn)
				logOutcome(ctx, cur, attempt, outcome)
				r.afterWrite(ctx, cur.Status.Phase, upd, step, destinationID(upd))
				if upd.Spec.Outputs != nil && upd.Status.Phase == actionsv1alpha1.PhaseSucceeded && upd.Status.Outputs == nil &&
					upd.DeletionTimestamp.IsZero() {
					return r.settleOutputs(ctx, upd) // recorded first (DESIGN rule 2), then the outputs
				}
				return requeueAt(step.At, r.Clock.Now()), nil
			}
			if res, done, ferr := r.recordFailed(ctx, cur, upd, attempt, outcome, err, try); done {
				return res, ferr
			}
			if !apierrors.IsConflict(err) {
				if serr := sleepStep(ctx, &backoff); serr != nil {
					return ctrl.Result{}, fmt.Errorf("recording the outcome of attempt %d (kept in memory): %w", attempt, err)
				}
			}
		}
		if backoff.Steps <= 0 {
			return ctrl.Result{}, fmt.Errorf("recording the outcome of attempt %d (kept in memory, will retry the write): %w", attempt, err)
		}
		next := &actionsv1alpha1.ExternalAction{}
		if gerr := r.APIReader.Get(ctx, nn, next); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				r.pending.Delete(nn)
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("re-reading to record the outcome of attempt %d (kept in memory): %w", attempt, gerr)
		}
		cur, fresh = next, true
		if apierrors.IsConflict(err) {
			backoff.Steps-- // a Conflict costs a step of the bound too, but no sleep: the fresh copy decides again
		}
	}
}

// recordFailed handles a failed outcome write that retrying cannot fix: the object is gone, the status is
// refused, or the object is being deleted and the API server keeps failing (then it is finalized with the
// outcome in memory). done false means: re-read and try again.
func (r *ExternalActionReconciler) recordFailed(ctx context.Context, cur, upd *actionsv1alpha1.ExternalAction, attempt int32,
	outcome ledger.Outcome, err error, try int) (ctrl.Result, bool, error) {
	nn := types.NamespacedName{Namespace: cur.Namespace, Name: cur.Name}
	deleting := !cur.DeletionTimestamp.IsZero()
	switch {
	case apierrors.IsNotFound(err):
		r.pending.Delete(nn)
		return ctrl.Result{}, true, nil
	case errors.Is(err, errStatusRefused):
		log.FromContext(ctx).Error(err, "the outcome cannot be recorded; dropping it from memory", "attempt", attempt, "result", outcome.Class)
		r.event(cur, &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonStatusRefused, Message: fmt.Sprintf(
			"the outcome of attempt %d (%s) cannot be recorded: %v. The open claim is settled by the rules for an "+
				"uncertain attempt once it expires", attempt, outcome.Class, err)})
		if deleting {
			res, ferr := r.finalizeWithOutcome(ctx, upd)
			return res, true, ferr
		}
		r.pending.Delete(nn)
		if c := cur.Status.Claim; c != nil {
			return requeueAt(c.ExpiresAt.Time, r.Clock.Now()), true, nil
		}
		return ctrl.Result{}, true, nil
	case deleting && !apierrors.IsConflict(err) && try >= 2:
		log.FromContext(ctx).Info("deleting: the outcome could not be written; finalizing with it", "attempt", attempt, "error", err.Error())
		res, ferr := r.finalizeWithOutcome(ctx, upd)
		return res, true, ferr
	}
	return ctrl.Result{}, false, nil
}

// finalizeWithOutcome finalizes an object being deleted whose outcome, held in memory, could not be written:
// xa carries that outcome in its (unwritten) status, so the tombstone records it. The outcome stays parked
// until the finalizer is gone, so a failed attempt at it is retried with the same record.
func (r *ExternalActionReconciler) finalizeWithOutcome(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	res, err := r.finalize(ctx, xa)
	if err == nil && res.IsZero() {
		r.pending.Delete(types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name})
	}
	return res, err
}

// reconcileTerminal handles decisions by people and garbage collection of finished actions.
func (r *ExternalActionReconciler) reconcileTerminal(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	now := r.Clock.Now()
	// A finished holder gives its subject up (again, should the release after its outcome have failed).
	if xa.Spec.Subject != "" && releasable(xa) {
		if err := r.releaseSubject(ctx, xa); err != nil {
			return ctrl.Result{}, err
		}
	}
	// spec.outputs are settled before anything else of a Succeeded action, and before it can be collected.
	if xa.Spec.Outputs != nil && xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
		if res, done, err := r.reconcileOutputs(ctx, xa); done {
			return res, err
		}
	}
	if decision, ok := xa.Annotations[actionsv1alpha1.AnnotationResolve]; ok {
		return r.resolve(ctx, xa, decision, now)
	}
	if xa.Status.ObservedGeneration != xa.Generation {
		return r.observeFinished(ctx, xa, now)
	}
	if xa.Status.ExpiresAt != nil && xa.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown {
		if left := xa.Status.ExpiresAt.Sub(now); left > 0 {
			return ctrl.Result{RequeueAfter: left}, nil
		}
		return r.collect(ctx, xa)
	}
	return ctrl.Result{}, nil
}

// observeFinished observes a new generation of a finished action (ledger.ObserveFinished): the retention in
// force (spec.ttlSecondsAfterFinished, else the destination's, else the default) recomputes expiresAt from
// completedAt, and the conditions follow the generation. The decision is made on a copy read from the API
// server, not the cache, so that the write carries the whole recorded status.
func (r *ExternalActionReconciler) observeFinished(ctx context.Context, cached *actionsv1alpha1.ExternalAction, now time.Time) (ctrl.Result, error) {
	xa := &actionsv1alpha1.ExternalAction{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), xa); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !xa.Status.Phase.Terminal() {
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	env := r.envFor(xa, nil, retry.Policy{}, 0, now)
	destID := ""
	if dest, err := r.resolveDestination(ctx, xa); err == nil {
		env, destID = r.envFor(xa, dest, dest.Policy, dest.DeadlineDur, now), dest.ID
	}
	st := ledger.ObserveFinished(&xa.Status, env)
	if st == nil {
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	log.FromContext(ctx).Info("observed a new generation of a finished action", "generation", xa.Generation,
		"phase", st.Phase, "expiresAt", st.ExpiresAt)
	return r.apply(ctx, xa, ledger.Step{Kind: ledger.KindNone, Status: st, At: timeOf(st.ExpiresAt)}, destID)
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// resolve applies the resolve annotation, records the decision, then clears the annotation.
func (r *ExternalActionReconciler) resolve(ctx context.Context, xa *actionsv1alpha1.ExternalAction, decision string, now time.Time) (ctrl.Result, error) {
	env := r.envFor(xa, nil, retry.Policy{}, 0, now)
	destID := ""
	if dest, err := r.resolveDestination(ctx, xa); err == nil {
		policy, dl, _ := tighten(dest.Policy, dest.DeadlineDur, xa.Spec.RetryPolicy)
		env = r.envFor(xa, dest, policy, dl, now)
		destID = dest.ID
	}
	step, err := ledger.Resolve(&xa.Status, decision, xa.Annotations[actionsv1alpha1.AnnotationResolveReason], env)
	if err != nil {
		// The status write of a decision is seen before the annotation's removal: that stale read is not a
		// new, invalid decision, so only the annotation is cleared, without a warning.
		if res := xa.Status.Resolution; res == nil || res.Decision != decision {
			r.Recorder.Eventf(xa, nil, corev1.EventTypeWarning, "InvalidDecision", "Resolve", "ignored %s=%q: %v", actionsv1alpha1.AnnotationResolve, decision, err)
		}
	} else {
		upd := xa.DeepCopy()
		upd.Status = *step.Status
		if err := r.updateStatus(ctx, upd); err != nil {
			if errors.Is(err, errStatusRefused) {
				return ctrl.Result{}, r.refused(upd, "the decision", err)
			}
			return ctrl.Result{}, ignoreConflict(err) // a Conflict: the next reconcile decides again
		}
		metrics.ManualResolutions.WithLabelValues(decision).Inc()
		r.afterWrite(ctx, xa.Status.Phase, upd, step, destID)
		xa = upd
	}
	patch := client.MergeFrom(xa.DeepCopy())
	delete(xa.Annotations, actionsv1alpha1.AnnotationResolve)
	delete(xa.Annotations, actionsv1alpha1.AnnotationResolveReason)
	if err := r.Patch(ctx, xa, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// apply writes step.Status (if any) with the resourceVersion it was decided on, emits its event, and
// requeues from the schedule.
func (r *ExternalActionReconciler) apply(ctx context.Context, xa *actionsv1alpha1.ExternalAction, step ledger.Step, destID string) (ctrl.Result, error) {
	if step.Status != nil {
		upd := xa.DeepCopy()
		upd.Status = *step.Status
		if err := r.writeStep(ctx, upd); err != nil {
			return ctrl.Result{}, err
		}
		r.afterWrite(ctx, xa.Status.Phase, upd, step, destID)
	} else if step.Event != nil {
		r.event(xa, step.Event)
	}
	return requeueAt(step.At, r.Clock.Now()), nil
}

// writeStep writes a decided status (not an outcome) with updateStatus. A Conflict or NotFound is nil (the
// next reconcile decides again); a refused write is a Warning Event and a terminal error.
func (r *ExternalActionReconciler) writeStep(ctx context.Context, upd *actionsv1alpha1.ExternalAction) error {
	err := r.updateStatus(ctx, upd)
	if errors.Is(err, errStatusRefused) {
		return r.refused(upd, "the status", err)
	}
	return ignoreConflict(err)
}

// requeueAt requeues at t (from the schedule stored in status); zero t means no requeue.
func requeueAt(t, now time.Time) ctrl.Result {
	if t.IsZero() {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: max(t.Sub(now), time.Millisecond)}
}

// afterWrite runs once the status write of step succeeded (prev is the phase before it): it logs a phase
// change, moves the outcome_unknown gauge at the transition (GaugeUpdater's refresh corrects it), emits the
// step's event and records the terminal metrics.
func (r *ExternalActionReconciler) afterWrite(ctx context.Context, prev actionsv1alpha1.Phase, xa *actionsv1alpha1.ExternalAction,
	step ledger.Step, destID string) {
	if step.Event != nil {
		r.event(xa, step.Event)
	}
	if step.Status == nil {
		return
	}
	if phase := step.Status.Phase; phase != prev {
		logPhaseChange(ctx, xa, prev, destID)
		switch actionsv1alpha1.PhaseOutcomeUnknown {
		case phase:
			metrics.OutcomeUnknown.Inc()
		case prev:
			metrics.OutcomeUnknown.Dec()
		}
	}
	if !step.Status.Phase.Terminal() {
		return
	}
	r.Limiter.Forget(destinationID(xa), xa.Namespace+"/"+xa.Name)
	r.releaseAfterWrite(xa)
	metrics.ActionDuration.WithLabelValues(string(step.Status.Phase)).Observe(r.Clock.Since(xa.CreationTimestamp.Time).Seconds())
	if step.Status.Phase == actionsv1alpha1.PhaseExhausted && destID != "" {
		metrics.Exhausted.WithLabelValues(destID).Inc()
	}
}

func (r *ExternalActionReconciler) event(xa *actionsv1alpha1.ExternalAction, e *ledger.Event) {
	if !r.emits(e) {
		return
	}
	t := corev1.EventTypeNormal
	if e.Warning {
		t = corev1.EventTypeWarning
	}
	// The API server refuses a longer note: the event would be lost.
	r.Recorder.Eventf(xa, nil, t, e.Reason, "Reconcile", "%s", cutUTF8(e.Message, maxEventNoteLength))
}

// emits reports whether e is emitted under the manager's events policy: everything with AllEvents, else
// everything but the Normal Succeeded event of a plain success (a replay is reason Replayed, a decision Resolved).
func (r *ExternalActionReconciler) emits(e *ledger.Event) bool {
	return r.AllEvents || e.Warning || e.Reason != actionsv1alpha1.ReasonSucceeded
}

// destinationRecheck is how often an action waiting on its destination looks again without a watch event.
const destinationRecheck = 15 * time.Second

// waitOnDestination records why the destination cannot be used (reason DestinationNotReady, or the more precise
// SecretNotAllowed, NamespaceNotAllowed, InsecureSkipVerifyNotAllowed, EgressDenied, PathOutsideBase) as
// Stalled=True with the phase kept (ledger.Blocked): lastError carries the message (the ERROR column), a
// retry still scheduled stays in nextAttemptAt and a past one is cleared. The wait ends as soon as the
// destination becomes usable: a Destination, ClusterDestination or Namespace watch event wakes the action
// (SetupWithManager), and destinationRecheck is only the fallback.
func (r *ExternalActionReconciler) waitOnDestination(ctx context.Context, xa *actionsv1alpha1.ExternalAction, err error, env ledger.Env) (ctrl.Result, error) {
	reason := destinationReason(err, actionsv1alpha1.ReasonDestinationNotReady)
	step := ledger.Blocked(&xa.Status, reason, err.Error(), env)
	if step.Status != nil {
		step.Event = &ledger.Event{Warning: true, Reason: reason, Message: err.Error()}
	}
	res, aerr := r.apply(ctx, xa, step, "")
	if aerr != nil {
		return res, aerr
	}
	wait := destinationRecheck
	if n := xa.Status.NextAttemptAt; n != nil && n.Sub(r.Clock.Now()) > wait {
		wait = n.Sub(r.Clock.Now())
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}

// envFor is the one ledger.Env builder. With dest nil (the destination is gone or unusable) the env still
// carries the action's retention (spec.ttlSecondsAfterFinished, else DefaultTTLAfterFinished) and its
// stored deadline, so that whatever is decided without a destination keeps the object for its horizon.
func (r *ExternalActionReconciler) envFor(xa *actionsv1alpha1.ExternalAction, dest *resolvedDestination,
	policy retry.Policy, deadline time.Duration, now time.Time) ledger.Env {
	env := ledger.Env{
		Now: now, Holder: r.Holder, Generation: xa.Generation, Rand: r.rand(), ClaimMargin: r.ClaimMargin,
		Policy: policy, Retention: DefaultTTLAfterFinished, Outputs: xa.Spec.Outputs != nil,
	}
	if dest != nil {
		env.AttemptTimeout, env.Retention = dest.Timeout, dest.Retention
		env.RepeatSafe, env.KeySupported, env.PostCheck = repeatSafe(dest, xa), dest.KeySupported, dest.Spec.Reconciliation != nil
		if rc := dest.Spec.Reconciliation; rc != nil && rc.MaxChecks != nil {
			env.MaxPostChecks = *rc.MaxChecks
		}
	}
	if xa.Status.Deadline != nil {
		env.Policy.Deadline = xa.Status.Deadline.Time
	} else {
		env.Policy.Deadline = ledger.EffectiveDeadline(xa.CreationTimestamp.Time, deadline)
	}
	if xa.Spec.TTLSecondsAfterFinished != nil {
		env.Retention = time.Duration(*xa.Spec.TTLSecondsAfterFinished) * time.Second
	}
	return env
}

// checkSpec checks what the action asks against its destination: a retry policy that only tightens the
// destination's (returned with its deadline), a compilable successWhen, and a body within bounds (returned in
// canonical form). Any error is an InvalidSpec.
func (r *ExternalActionReconciler) checkSpec(xa *actionsv1alpha1.ExternalAction, dest *resolvedDestination) (
	retry.Policy, time.Duration, []byte, error) {
	policy, deadlineDur, err := tighten(dest.Policy, dest.DeadlineDur, xa.Spec.RetryPolicy)
	if err != nil {
		return policy, 0, nil, err
	}
	if _, err := r.successProgram(xa); err != nil {
		return policy, 0, nil, err
	}
	if err := r.checkOutputs(xa); err != nil {
		return policy, 0, nil, err
	}
	body, err := requestBody(xa)
	return policy, deadlineDur, body, err
}

func (r *ExternalActionReconciler) rand() func() float64 {
	if r.Rand != nil {
		return r.Rand
	}
	return rand.Float64
}

func (r *ExternalActionReconciler) successProgram(xa *actionsv1alpha1.ExternalAction) (*expr.Program, error) {
	if xa.Spec.SuccessWhen == "" {
		return nil, nil
	}
	p, err := r.Exprs.Get(xa.Spec.SuccessWhen)
	if err != nil {
		return nil, fmt.Errorf("spec.successWhen: %w", err)
	}
	return p, nil
}

func conflictMessage(xa *actionsv1alpha1.ExternalAction, bound, got, where string) string {
	return fmt.Sprintf("the key %s/%s is bound to fingerprint %s by %s, but this spec has fingerprint %s; nothing was sent. "+
		"The name is the idempotency key: to perform a different action, create a new ExternalAction with a new name",
		xa.Namespace, xa.Name, bound, where, got)
}

// destinationID is the limiter and metrics identity of the action's destination.
func destinationID(xa *actionsv1alpha1.ExternalAction) string {
	if xa.Spec.DestinationRef.Kind == kindClusterDestination {
		return "ClusterDestination/" + xa.Spec.DestinationRef.Name
	}
	return "Destination/" + xa.Namespace + "/" + xa.Spec.DestinationRef.Name
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// SetupWithManager sets up the controller with the Manager.
func (r *ExternalActionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Exprs == nil {
		r.Exprs = expr.NewCache(1024)
	}
	if r.Limiter == nil {
		r.Limiter = limiter.NewRegistry()
	}
	if r.MaxConcurrentReconciles <= 0 {
		r.MaxConcurrentReconciles = 16
	}
	if err := r.newDispatcher(); err != nil {
		return err
	}
	if err := IndexSubject(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := mgr.Add(dispatcherRunnable{r: r}); err != nil {
		return fmt.Errorf("adding the dispatcher: %w", err)
	}
	if err := IndexDestinationRef(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing actions by destination: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&actionsv1alpha1.ExternalAction{}).
		// Outcomes handed back by the dispatcher wake their object (DESIGN rule 10).
		WatchesRawSource(source.Channel(r.outcomes, &handler.EnqueueRequestForObject{})).
		// spec.subject: a holder that finishes, is resolved or goes wakes the other actions on its subject.
		Watches(&actionsv1alpha1.ExternalAction{}, handler.EnqueueRequestsFromMapFunc(r.actionsOnSameSubject),
			builder.WithPredicates(subjectChanged)).
		// A namespace's labels decide which ClusterDestinations its actions may use (spec.namespaceSelector):
		// metadata is all that is read, and a label change wakes the actions waiting on NamespaceNotAllowed.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.actionsUsingClusterDestinations),
			builder.OnlyMetadata, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		// A destination created, fixed or validated again wakes the actions that reference it (ledger.Blocked).
		Watches(&actionsv1alpha1.Destination{}, handler.EnqueueRequestsFromMapFunc(r.actionsUsingDestination)).
		Watches(&actionsv1alpha1.ClusterDestination{}, handler.EnqueueRequestsFromMapFunc(r.actionsUsingDestination)).
		// spec.outputs: a written output deleted later is noticed (OutputMissing). Only metadata is watched, and the
		// manager's cache holds only objects labelled as outputs (OutputCacheOptions).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(actionOfOutput), builder.OnlyMetadata).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(actionOfOutput), builder.OnlyMetadata).
		Named("externalaction").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles, SkipNameValidation: &r.SkipNameValidation}).
		Complete(r)
}

// actionsUsingClusterDestinations maps a Namespace to the unfinished ExternalActions in it that reference a
// ClusterDestination (listed from the cache), so that they re-check its namespaceSelector.
func (r *ExternalActionReconciler) actionsUsingClusterDestinations(ctx context.Context, ns client.Object) []reconcile.Request {
	list := &actionsv1alpha1.ExternalActionList{}
	if err := r.List(ctx, list, client.InNamespace(ns.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).V(1).Info("listing actions of a relabelled namespace failed", "namespace", ns.GetName(), "err", err.Error())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		xa := &list.Items[i]
		if xa.Spec.DestinationRef.Kind == kindClusterDestination && !xa.Status.Phase.Terminal() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(xa)})
		}
	}
	return out
}
