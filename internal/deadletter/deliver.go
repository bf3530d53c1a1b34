package deadletter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/internal/send"
	"github.com/actionledger/actionledger/internal/status"
	"github.com/actionledger/actionledger/internal/tracing"
)

// Manager delivers dead-letter records. The controller calls Reconcile for every terminal action (before its
// collection) and Record for a delivery result handed back by the dispatcher.
type Manager struct {
	// Reader reads fresh copies from the API server (the manager's APIReader): the cache trims finished actions.
	Reader   client.Reader
	Resolver *destination.Resolver
	Writer   *status.Writer
	// Sender makes the delivery's dispatcher job (send.Sender.DeadLetterJob): the one send path of the attempts
	// and post-checks, with its authorization, 401 token drop, redaction and classification.
	Sender *send.Sender
	Clock  clock.PassiveClock
	// Env is the decision environment of the action (holder, claim margin, jitter); the sink's policy,
	// timeout and repeat safety replace the destination's.
	Env func(xa *actionsv1alpha1.ExternalAction) ledger.Env
	// Submit hands a claimed job to the dispatcher (the reconciler's submit); a result already back is in the
	// mailbox, recorded by the next reconcile.
	Submit func(ctx context.Context, job dispatch.Job[*send.Result]) (*send.Result, error)
	// Passage is what every request passes before its claim, attempts' and deliveries' alike: the sink's shard
	// share, room in the dispatcher (the waiting room), its Secrets, rate limit and retry budget.
	Passage *send.Passage
}

// anyPhase are all the phases a sink may take.
var anyPhase = []actionsv1alpha1.DeadLetterPhase{"Exhausted", "Failed", "OutcomeUnknown"}

// sink is a resolved sink for one action.
type sink struct {
	spec *actionsv1alpha1.DeadLetterSink
	dest *destination.Resolved
	// id is the sink's identity, known even when it cannot be resolved.
	id string
}

// Reconcile moves xa's owed dead-letter record forward by at most one attempt. held is false when no record is
// owed or it is final: the caller goes on (with the action's collection, or its finalizer). While held, the
// action is neither collected nor let go: the record goes to the sink recorded in status.deadLetter (never
// derived again from the destinations), a sink that is missing or unusable is Refused and the action Stalled
// (DeadLetterSinkUnavailable) until it is usable again or a person gives the record up (AnnotationDeadLetter).
// xa may be a trimmed cache copy: the decision is made on it, and made again on a fresh copy from the API
// server before anything is written or sent (the record carries the action's conditions and response).
func (m *Manager) Reconcile(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, bool, error) {
	if !Owed(&xa.Status) {
		return ctrl.Result{}, false, nil // the happy path costs nothing: no read, no decision
	}
	if decision, ok := xa.Annotations[actionsv1alpha1.AnnotationDeadLetter]; ok {
		res, err := m.giveUp(ctx, xa, decision)
		return res, true, err
	}
	s, serr := m.resolveSink(ctx, xa, xa.Status.DeadLetter)
	now := m.Clock.Now()
	if serr == nil {
		cur := xa.Status.DeadLetter
		if step := Advance(cur, m.sinkEnv(xa, cur, s.dest, now)); step.Status == nil && step.Kind == ledger.KindWait {
			return ctrl.Result{RequeueAfter: requeue.After(step.At, now)}, true, nil // no read, no write
		}
	}
	fresh := &actionsv1alpha1.ExternalAction{}
	if err := m.Reader.Get(ctx, client.ObjectKeyFromObject(xa), fresh); err != nil {
		return ctrl.Result{}, true, client.IgnoreNotFound(err)
	}
	if !Owed(&fresh.Status) || (!fresh.Status.Phase.Terminal() && fresh.DeletionTimestamp.IsZero()) {
		return ctrl.Result{RequeueAfter: requeue.Now}, true, nil // the cache is behind: look again
	}
	return m.decide(ctx, fresh, s, serr, now)
}

// decide is Reconcile's decision on a fresh copy of the action.
func (m *Manager) decide(ctx context.Context, xa *actionsv1alpha1.ExternalAction, s sink, serr error, now time.Time) (ctrl.Result, bool, error) {
	cur := xa.Status.DeadLetter
	if serr != nil {
		if !xa.DeletionTimestamp.IsZero() && m.namespaceGoing(ctx, xa.Namespace) {
			// Holding the finalizer for a sink that cannot be used would keep the namespace Terminating forever.
			if _, err := m.write(ctx, xa, NamespaceDeleted(cur, serr.Error()), cur.Sink); err != nil {
				return ctrl.Result{}, true, err
			}
			return ctrl.Result{RequeueAfter: requeue.Now}, true, nil
		}
		return m.refuse(ctx, xa, cur, destination.Reason(serr, actionsv1alpha1.ReasonDestinationNotReady), serr.Error())
	}
	env := m.sinkEnv(xa, cur, s.dest, now)
	step := Advance(cur, env)
	switch {
	case step.Kind == ledger.KindSend:
		return m.claimAndSend(ctx, xa, s, cur, step, env)
	case step.Status != nil:
		if _, err := m.write(ctx, xa, step, s.id); err != nil {
			return ctrl.Result{}, true, err
		}
		return ctrl.Result{RequeueAfter: requeue.Now}, true, nil
	case step.Kind == ledger.KindWait:
		return ctrl.Result{RequeueAfter: requeue.After(step.At, now)}, true, nil
	}
	return ctrl.Result{}, false, nil
}

// Owe is the status writer's Terminal hook: on the status about to be written that ends xa in a terminal phase,
// it records the dead-letter record owed, if a sink applies (Owe): the action's own spec.deadLetter, else its
// destination's as the destination resolves now. This is the one moment a sink is looked up from the
// destinations; from then on the recorded sink is used.
func (m *Manager) Owe(ctx context.Context, xa *actionsv1alpha1.ExternalAction) {
	if xa.Status.DeadLetter != nil || !Due(xa.Status.Phase, anyPhase) {
		return
	}
	spec := m.sinkOf(ctx, xa)
	if spec == nil {
		return
	}
	if Owe(&xa.Status, spec, sinkID(xa, spec.DestinationRef), xa.Generation, m.Clock.Now()) {
		log.FromContext(ctx).V(1).Info("dead-letter record owed", "sink", xa.Status.DeadLetter.Sink, "phase", string(xa.Status.Phase))
	}
}

// giveUp applies a person's decision on the record (AnnotationDeadLetter) on a fresh copy, records it
// (GiveUp: status, Event, metric) and then removes the annotations. A decision that cannot apply is a Warning
// Event InvalidDecision; a record already final (a stale read of the write just made) only loses the annotation.
func (m *Manager) giveUp(ctx context.Context, xa *actionsv1alpha1.ExternalAction, decision string) (ctrl.Result, error) {
	fresh := &actionsv1alpha1.ExternalAction{}
	if err := m.Reader.Get(ctx, client.ObjectKeyFromObject(xa), fresh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := m.Clock.Now()
	step, err := GiveUp(fresh.Status.DeadLetter, decision, fresh.Annotations[actionsv1alpha1.AnnotationDeadLetterReason], now)
	switch {
	case err == nil && step.Status == nil: // an open delivery attempt: its answer comes first
		return ctrl.Result{RequeueAfter: requeue.After(step.At, now)}, nil
	case err == nil:
		upd, werr := m.write(ctx, fresh, step, fresh.Status.DeadLetter.Sink)
		if werr != nil || upd == nil {
			return ctrl.Result{RequeueAfter: requeue.ClaimLost}, werr // a Conflict: the next reconcile decides again
		}
		log.FromContext(ctx).Info("dead-letter record given up by a person", "sink", upd.Status.DeadLetter.Sink)
		fresh = upd
	case !errors.Is(err, ErrFinal):
		m.Writer.Event(fresh, &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonInvalidDecision,
			Message: fmt.Sprintf("ignored %s=%q: %v", actionsv1alpha1.AnnotationDeadLetter, decision, err)})
	}
	patch := client.MergeFrom(fresh.DeepCopy())
	delete(fresh.Annotations, actionsv1alpha1.AnnotationDeadLetter)
	delete(fresh.Annotations, actionsv1alpha1.AnnotationDeadLetterReason)
	if err := m.Writer.Client.Patch(ctx, fresh, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{RequeueAfter: requeue.Now}, nil
}

// namespaceGoing reports whether namespace is being deleted (read from the API server; an error says no).
func (m *Manager) namespaceGoing(ctx context.Context, namespace string) bool {
	ns := &corev1.Namespace{}
	if err := m.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return apierrors.IsNotFound(err)
	}
	return !ns.DeletionTimestamp.IsZero()
}

// sinkOf is the action's own spec.deadLetter, else its destination's; nil when neither has one, or the
// destination is gone or unusable. Only Owe calls it, when the action finishes.
func (m *Manager) sinkOf(ctx context.Context, xa *actionsv1alpha1.ExternalAction) *actionsv1alpha1.DeadLetterSink {
	if xa.Spec.DeadLetter != nil {
		return xa.Spec.DeadLetter
	}
	own, err := m.Resolver.Resolve(ctx, xa)
	if err != nil {
		return nil
	}
	return own.Spec.DeadLetter
}

// sinkID is the identity of the sink ref as xa's namespace sees it (destination.ID).
func sinkID(xa *actionsv1alpha1.ExternalAction, ref actionsv1alpha1.DestinationReference) string {
	probe := &actionsv1alpha1.ExternalAction{}
	probe.Namespace, probe.Name = xa.Namespace, xa.Name
	probe.Spec.DestinationRef = ref
	return destination.ID(probe)
}

// resolveSink resolves the recorded sink cur.Sink as the action's namespace sees it: a Destination of that
// namespace, or a ClusterDestination whose namespaceSelector admits it (destination.Resolver's rules), with the
// recorded path and mode. An error means nothing may be sent (its reason: destination.Reason).
func (m *Manager) resolveSink(ctx context.Context, xa *actionsv1alpha1.ExternalAction, cur *actionsv1alpha1.DeadLetterStatus) (sink, error) {
	s := sink{id: cur.Sink, spec: &actionsv1alpha1.DeadLetterSink{Path: cur.Path, Mode: cur.Mode}}
	ref, err := SinkRef(cur.Sink, xa.Namespace)
	if err != nil {
		return s, err
	}
	s.spec.DestinationRef = ref
	if cur.Path == "" && cur.Mode == "" {
		// Recorded by a manager that did not record the path and mode: they are taken from the spec that names
		// the same sink, if it still does.
		if spec := m.sinkOf(ctx, xa); spec != nil && sinkID(xa, spec.DestinationRef) == cur.Sink {
			s.spec.Path, s.spec.Mode = spec.Path, spec.Mode
		}
	}
	probe := &actionsv1alpha1.ExternalAction{}
	probe.Namespace, probe.Name = xa.Namespace, xa.Name
	probe.Spec.DestinationRef = ref
	probe.Spec.Request.Method = http.MethodPost
	dest, err := m.Resolver.Resolve(ctx, probe)
	if err == nil {
		err = dest.NotReady()
	}
	if err != nil {
		return s, err
	}
	s.dest = dest
	return s, nil
}

// sinkEnv is the decision environment of a delivery to dest: the action's holder, margin and jitter with the
// sink's policy, timeout and repeat safety, and the delivery's deadline.
func (m *Manager) sinkEnv(xa *actionsv1alpha1.ExternalAction, cur *actionsv1alpha1.DeadLetterStatus, dest *destination.Resolved,
	now time.Time) ledger.Env {
	env := m.Env(xa)
	env.Now = now
	env.Policy, env.AttemptTimeout = dest.Policy, dest.Timeout
	env.KeySupported = dest.KeySupported
	env.RepeatSafe = retry.RepeatSafe(string(dest.Spec.Effect), http.MethodPost, dest.KeySupported)
	env.PostCheck, env.Outputs = false, false
	switch {
	case cur.Deadline != nil:
		env.Policy.Deadline = cur.Deadline.Time
	case dest.DeadlineDur > 0:
		env.Policy.Deadline = now.Add(dest.DeadlineDur)
	default:
		env.Policy.Deadline = time.Time{}
	}
	return env
}

// claimAndSend builds the record and its key, passes what an attempt passes (send.Passage: the sink's shard
// share, room in the dispatcher, its Secrets, rate limit, and retry budget for a retry), writes the claim (DESIGN
// rule 1) and only then hands the delivery to the dispatcher (rule 10). What fails or waits before the claim
// sends nothing and spends no delivery attempt.
func (m *Manager) claimAndSend(ctx context.Context, xa *actionsv1alpha1.ExternalAction, s sink,
	cur *actionsv1alpha1.DeadLetterStatus, step Step, env ledger.Env) (ctrl.Result, bool, error) {
	target, err := httpexec.JoinURL(s.dest.Spec.URL, pathOf(s.spec))
	if err != nil {
		return m.refuse(ctx, xa, cur, actionsv1alpha1.ReasonPathOutsideBase, "deadLetter.path: "+err.Error())
	}
	key := types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name}
	h := m.Passage.Near(s.dest, key, env.Now, env.Rand)
	if h == nil {
		h = m.Passage.Far(ctx, s.dest, key, step.Status.Claim.Attempt == 1, env.Now, env.Rand)
	}
	switch {
	case h == nil:
	case h.Err != nil:
		return m.refuse(ctx, xa, cur, destination.Reason(h.Err, actionsv1alpha1.ReasonDestinationNotReady), h.Err.Error())
	default:
		return m.wait(ctx, xa, cur, h)
	}
	step = Keyed(step, Key(s.dest.Spec, xa.Namespace, xa.Name))
	id := step.Status.IdempotencyKey
	header, body, err := Encode(ctx, RecordOf(xa, destination.ID(xa), id), id, s.spec.Mode)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	claimed, err := m.write(ctx, xa, step, s.id)
	if err != nil || claimed == nil {
		return ctrl.Result{RequeueAfter: requeue.ClaimLost}, true, err // a Conflict: nothing is sent
	}
	ctx, span := tracing.Reconcile(ctx, claimed, s.id, env.Now) // traced like an attempt (docs/tracing.md)
	defer span.End()
	job := m.Sender.DeadLetterJob(claimed, s.dest, target, header, body, env)
	p, err := m.Submit(ctx, tracing.Delivery(ctx, job, send.Traced))
	switch {
	case errors.Is(err, dispatch.ErrAlreadyQueued):
		return ctrl.Result{}, true, nil
	case p != nil && err != nil: // refused by the dispatcher: not sent
		res, err := m.Record(ctx, claimed, p)
		return res, true, err
	case p != nil: // back already: in the mailbox, recorded by the next reconcile
		return ctrl.Result{RequeueAfter: requeue.Now}, true, nil
	}
	return ctrl.Result{RequeueAfter: requeue.After(claimed.Status.DeadLetter.Claim.ExpiresAt.Time, m.Clock.Now())}, true, nil
}

// wait records that the next delivery attempt waits for the sink (Delayed, reason ConcurrencyLimited,
// RateLimited or RetryBudgetExhausted: written only when the hold is shown, as an attempt's is, and the reason
// changes; never counted as a delivery outcome). The passage parked the action in the sink's waiting room, which
// wakes it when the sink's capacity comes (a completion there, or the limiter's time); h.After is only the
// safety net.
func (m *Manager) wait(ctx context.Context, xa *actionsv1alpha1.ExternalAction, cur *actionsv1alpha1.DeadLetterStatus,
	h *send.Hold) (ctrl.Result, bool, error) {
	if step := Delayed(cur, h.Reason, h.Message); h.Reason != "" && h.Shown && step.Status != nil {
		if _, err := m.Writer.Apply(ctx, xa, actionStep(&xa.Status, step, xa.Generation, m.Clock.Now()), cur.Sink); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	return ctrl.Result{RequeueAfter: h.After}, true, nil
}

// Record writes the outcome of a delivery attempt into status.deadLetter with the status writer's Settle
// (DESIGN rule 2): decided again on fresh reads, never sent again to refresh it. A nil error means the
// result is settled (written, or no longer open) and may leave the mailbox.
func (m *Manager) Record(ctx context.Context, xa *actionsv1alpha1.ExternalAction, p *send.Result) (ctrl.Result, error) {
	fresh := &actionsv1alpha1.ExternalAction{}
	if err := m.Reader.Get(ctx, client.ObjectKeyFromObject(xa), fresh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err) // gone: nothing to record on
	}
	xa = fresh
	var written Step
	s := m.Writer.Settle(ctx, xa, func(st *actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
		dl, ok := RecordOutcome(st.DeadLetter, p.Attempt, p.Outcome, p.Env)
		if !ok {
			return ledger.Step{}, false
		}
		written = dl
		return actionStep(st, dl, xa.Generation, m.Clock.Now()), true
	})
	switch {
	case s.Written != nil:
		count(written)
		log.FromContext(ctx).Info("dead-letter delivery attempt finished", "attempt", p.Attempt, "sink", written.Status.Sink,
			"state", string(written.Status.State), "statusCode", p.Outcome.StatusCode, "errorClass", p.Outcome.ErrorClass)
		return ctrl.Result{RequeueAfter: requeue.Now}, nil
	case s.Closed, s.Gone:
		return ctrl.Result{}, nil
	case s.Refused != nil:
		// Retrying the same status cannot succeed: the Warning Event says so, and the claim follows DESIGN rule 3.
		_ = m.Writer.Refused(s.From, "the dead-letter delivery outcome", s.Refused)
		return ctrl.Result{}, nil //nolint:nilerr // settled: the Event reports it, and the claim follows DESIGN rule 3
	}
	return ctrl.Result{}, s.Err
}

// refuse records that the sink cannot be used; nothing is sent. Looked at again after destination.Recheck
// (a watch event on the sink does not wake the action).
func (m *Manager) refuse(ctx context.Context, xa *actionsv1alpha1.ExternalAction, cur *actionsv1alpha1.DeadLetterStatus,
	reason, msg string) (ctrl.Result, bool, error) {
	step := Refuse(cur, reason, msg)
	if step.Status != nil {
		if _, err := m.write(ctx, xa, step, cur.Sink); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	return ctrl.Result{RequeueAfter: destination.Recheck}, true, nil
}

// write writes step's status.deadLetter with the status writer's Apply (the resourceVersion of xa: a Conflict
// returns nil, and nothing may be sent on it). The action's phase is never changed; of its conditions only
// those Show sets.
func (m *Manager) write(ctx context.Context, xa *actionsv1alpha1.ExternalAction, step Step, id string) (*actionsv1alpha1.ExternalAction, error) {
	upd, err := m.Writer.Apply(ctx, xa, actionStep(&xa.Status, step, xa.Generation, m.Clock.Now()), id)
	if upd != nil && err == nil {
		count(step)
	}
	return upd, err
}

// count counts a written step in DeadLetterDeliveries (not a claim: its outcome is counted when recorded).
func count(step Step) {
	if st := step.Status; st != nil && st.State != actionsv1alpha1.DeadLetterDelivering {
		metrics.DeadLetterDeliveries.WithLabelValues(st.Sink, outcomeLabel(st.State)).Inc()
	}
}

// actionStep is the action's status with step's status.deadLetter and the conditions that show it (Show), as a
// ledger step the writer takes.
func actionStep(cur *actionsv1alpha1.ExternalActionStatus, step Step, generation int64, now time.Time) ledger.Step {
	st := cur.DeepCopy()
	st.DeadLetter = step.Status
	Show(st, generation, now)
	return ledger.Step{Kind: ledger.KindNone, Status: st, Event: step.Event}
}

// outcomeLabel is the outcome label of DeadLetterDeliveries for a written state.
func outcomeLabel(s actionsv1alpha1.DeadLetterState) string {
	switch s {
	case actionsv1alpha1.DeadLetterPending, actionsv1alpha1.DeadLetterDelivering:
		return "Retried"
	}
	return string(s)
}
