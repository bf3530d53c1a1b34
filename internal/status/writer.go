// Package status is the one writer of ExternalAction status. Every status write of the controller and of its
// features (outputs, the subject lock) goes through a Writer, with one of three operations, each with one rule
// for a Conflict (HTTP 409: the object changed since it was read):
//
//   - Claim writes a claim on the resourceVersion it was decided on (DESIGN rule 1). A Conflict means another
//     decision won: ErrClaimLost, and nothing is sent.
//   - Apply writes a decided step that is not an outcome (a wait, a failure before any send, a decision by a
//     person, a new retention). A Conflict means observe again: nothing is written, no Event is emitted, and
//     the next reconcile decides anew on the newer object.
//   - Settle writes what an attempt or a post-check answered (DESIGN rule 2): decided again on fresh reads
//     after a Conflict, retried with Backoff on other errors until written, trimmed when the API server
//     refuses the destination's values, or until the object is gone.
//
// Every write first cuts the destination-supplied strings to their CRD bounds (Bound); an Invalid answer is
// retried once without them (Minimal), and a second Invalid is ErrRefused. Events, logs and metrics of a
// written step come after the write, in one place (afterWrite), and only from the write that won.
package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/redact"
	"github.com/actionledger/actionledger/internal/writeseats"
)

// MaxEventNoteLength is the API server's bound on an Event's note (message), in bytes: longer ones are refused.
const MaxEventNoteLength = 1024

// maxConditionMessageLength is metav1.Condition's bound on message, in bytes.
const maxConditionMessageLength = 32768

// ErrRefused marks a status write that the API server refused as Invalid (HTTP 422) even with every
// destination-supplied value dropped: retrying it cannot succeed.
var ErrRefused = errors.New("status refused as invalid")

// ErrClaimLost is Claim's answer to a Conflict: the claim was decided on a stale copy, or another holder
// moved first. Nothing may be sent.
var ErrClaimLost = errors.New("claim lost to a newer version")

// Backoff is the one bounded backoff of status writes retried in place (Settle): 50 ms doubling, jittered by
// 10%, ending once a step would pass 2 s (six sleeps, about 3 s in all). A Conflict re-reads at once and costs
// a step without sleeping. After the last step the write is left to the workqueue's rate-limited retry; an
// outcome stays in memory meanwhile (DESIGN rule 2).
var Backoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 2 * time.Second}

// Writer writes ExternalAction status and emits what follows a written step.
type Writer struct {
	// Client writes the status subresource (Update with the object's resourceVersion).
	Client client.Client
	// Reader reads fresh copies from the API server for Settle (the manager's APIReader).
	Reader client.Reader
	// Recorder emits the steps' Events.
	Recorder recorder.EventRecorder
	// Clock times the action-duration metric.
	Clock clock.PassiveClock
	// AllEvents emits the Normal Succeeded Event of a plain success too (manager flag --events=all).
	AllEvents bool
	// Terminal runs on the status about to be written (Apply, Settle) when the write ends the action in a
	// terminal phase, before the write: it adds what must be recorded in the same write as the phase (the
	// dead-letter record owed, internal/deadletter). It may change xa.Status only. nil: nothing.
	Terminal func(ctx context.Context, xa *actionsv1alpha1.ExternalAction)
	// Finished runs after a terminal phase was written (the destination's limiter forgets the key, the subject
	// is released); nil: nothing.
	Finished func(xa *actionsv1alpha1.ExternalAction)
	// DestinationID names the action's destination in logs and metrics ("Destination/<ns>/<name>" or
	// "ClusterDestination/<name>").
	DestinationID func(xa *actionsv1alpha1.ExternalAction) string
	// Seats bound the status writes one namespace has at the API server at once (internal/writeseats); every
	// write, the claim included, takes one of its namespace's seats first. nil: unbounded.
	Seats *writeseats.Seats
}

// Claim writes step's claim on xa's resourceVersion (DESIGN rule 1) and returns the object as written. A
// Conflict is ErrClaimLost; a refused status is a Warning Event and a terminal error; other errors are
// returned wrapped. Nothing may be sent unless the error is nil.
func (w *Writer) Claim(ctx context.Context, xa *actionsv1alpha1.ExternalAction, step ledger.Step) (*actionsv1alpha1.ExternalAction, error) {
	claimed := xa.DeepCopy()
	claimed.Status = *step.Status
	attempt := claimed.Status.Claim.Attempt
	if err := w.update(ctx, claimed); err != nil {
		switch {
		case apierrors.IsConflict(err):
			return nil, ErrClaimLost
		case errors.Is(err, ErrRefused):
			return nil, w.Refused(claimed, fmt.Sprintf("the claim of attempt %d", attempt), err)
		}
		return nil, fmt.Errorf("writing the claim of attempt %d: %w", attempt, err)
	}
	w.afterWrite(ctx, xa.Status.Phase, claimed, step, "")
	return claimed, nil
}

// Apply writes step.Status (if any) with the resourceVersion it was decided on and returns the object as
// written; without a status it only emits step's Event. A status equal to xa's is not written again (and its
// Event not emitted: nothing changed). A Conflict or NotFound returns nil and no error:
// nothing was written, nothing is emitted, and the next reconcile observes again. A refused status is a
// Warning Event and a terminal error. destID names the destination in logs and metrics ("" derives it).
func (w *Writer) Apply(ctx context.Context, xa *actionsv1alpha1.ExternalAction, step ledger.Step,
	destID string) (*actionsv1alpha1.ExternalAction, error) {
	if step.Status == nil {
		if step.Event != nil {
			w.Event(xa, step.Event)
		}
		return xa, nil
	}
	if equality.Semantic.DeepEqual(xa.Status, *step.Status) {
		return xa, nil // the same content again: nothing is written, and nothing changed to announce
	}
	upd := xa.DeepCopy()
	upd.Status = *step.Status
	w.terminal(ctx, xa.Status.Phase, upd)
	if err := w.update(ctx, upd); err != nil {
		if errors.Is(err, ErrRefused) {
			return nil, w.Refused(upd, "the status", err)
		}
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	w.afterWrite(ctx, xa.Status.Phase, upd, step, destID)
	return upd, nil
}

// Decide turns a copy's status into the step that settles it; false means there is nothing to settle on it
// (the attempt is no longer open).
type Decide func(st *actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool)

// Settled is how a Settle ended.
type Settled struct {
	// Written is the object as written (nil when nothing was), and Step what was written.
	Written *actionsv1alpha1.ExternalAction
	Step    ledger.Step
	// From is the copy the last decision was made on (the cached one, the claim's (SettleClaimed), or a fresh read).
	From *actionsv1alpha1.ExternalAction
	// Closed: a fresh copy from the API server (From) has nothing to settle (Decide said false): settled elsewhere.
	Closed bool
	// Gone: the object no longer exists.
	Gone bool
	// Unwritten is the last status decided but not written (with Refused or Stuck): the caller may finalize
	// with it (DESIGN rule 8).
	Unwritten *actionsv1alpha1.ExternalAction
	// Refused is ErrRefused wrapped: the status cannot be written even without the destination's values.
	Refused error
	// Stuck: the object is being deleted and the API server kept failing (non-Conflict) for three tries.
	Stuck bool
	// Err is the last error once the backoff is spent (or a fresh read failed): the workqueue retries.
	Err error
}

// Settle writes what decide makes of cur's status, re-reading from the API server on a Conflict or when the
// copy at hand has nothing to settle (the cache may lag behind the claim), and retrying other errors with
// Backoff. It never sends. On success the step's Event, logs and metrics follow (afterWrite).
func (w *Writer) Settle(ctx context.Context, cur *actionsv1alpha1.ExternalAction, decide Decide) Settled {
	return w.SettleClaimed(ctx, cur, nil, decide)
}

// SettleClaimed is Settle for an attempt whose claim this process wrote: claimed is the object as that claim
// write returned it (Claim), or nil. When cur has nothing to settle (the cache does not show the claim yet),
// Settle decides once on a copy of claimed before reading from the API server, and writes with claimed's
// resourceVersion: a Conflict means the object changed since the claim, and the fresh read decides as in
// Settle. claimed is never taken for a fresh copy (nothing to settle on it is not Closed) and is not changed.
func (w *Writer) SettleClaimed(ctx context.Context, cur, claimed *actionsv1alpha1.ExternalAction, decide Decide) Settled {
	backoff := Backoff
	fresh := false
	var err error
	for try := 0; ; try++ {
		step, ok := decide(&cur.Status)
		if !ok && !fresh && claimed != nil {
			cur, claimed = claimed.DeepCopy(), nil // once: the claim's own copy, before a read
			step, ok = decide(&cur.Status)
		}
		if !ok && fresh {
			return Settled{Closed: true, From: cur}
		}
		if ok {
			upd := cur.DeepCopy()
			upd.Status = *step.Status
			w.terminal(ctx, cur.Status.Phase, upd)
			if err = w.update(ctx, upd); err == nil {
				w.afterWrite(ctx, cur.Status.Phase, upd, step, "")
				return Settled{Written: upd, Step: step, From: cur}
			}
			deleting := !cur.DeletionTimestamp.IsZero()
			switch {
			case apierrors.IsNotFound(err):
				return Settled{Gone: true}
			case errors.Is(err, ErrRefused):
				return Settled{Refused: err, Unwritten: upd, From: cur}
			case deleting && !apierrors.IsConflict(err) && try >= 2:
				return Settled{Stuck: true, Unwritten: upd, From: cur, Err: err}
			case !apierrors.IsConflict(err):
				if serr := sleepStep(ctx, &backoff); serr != nil {
					return Settled{Err: err}
				}
			}
		}
		if backoff.Steps <= 0 {
			return Settled{Err: err}
		}
		next := &actionsv1alpha1.ExternalAction{}
		if gerr := w.Reader.Get(ctx, client.ObjectKeyFromObject(cur), next); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return Settled{Gone: true}
			}
			return Settled{Err: fmt.Errorf("re-reading from the API server: %w", gerr)}
		}
		cur, fresh = next, true
		if apierrors.IsConflict(err) {
			backoff.Steps-- // a Conflict costs a step of the bound too, but no sleep: the fresh copy decides again
		}
	}
}

// terminal runs the Terminal hook on upd, about to be written over a status in phase prev, when the write ends
// the action: the phase changes to a terminal one. The hook works on a copy of the decided status (the step's
// status is not changed).
func (w *Writer) terminal(ctx context.Context, prev actionsv1alpha1.Phase, upd *actionsv1alpha1.ExternalAction) {
	if w.Terminal == nil || upd.Status.Phase == prev || !upd.Status.Phase.Terminal() {
		return
	}
	upd.Status = *upd.Status.DeepCopy()
	w.Terminal(ctx, upd)
}

// Refused reports a status write refused even without the destination's values (ErrRefused): a Warning Event
// StatusRefused, and a terminal error, since retrying the same status cannot succeed.
func (w *Writer) Refused(xa *actionsv1alpha1.ExternalAction, what string, err error) error {
	w.Event(xa, &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonStatusRefused,
		Message: fmt.Sprintf("%s cannot be written: %v; nothing more is done until the object changes", what, err)})
	return reconcile.TerminalError(err)
}

// Event emits e on xa under the manager's events policy (AllEvents): every Warning, and every Normal Event
// but the Succeeded of a plain success. The note is cut to MaxEventNoteLength (a longer one is refused).
func (w *Writer) Event(xa *actionsv1alpha1.ExternalAction, e *ledger.Event) {
	if !w.AllEvents && !e.Warning && e.Reason == actionsv1alpha1.ReasonSucceeded {
		return
	}
	t := corev1.EventTypeNormal
	if e.Warning {
		t = corev1.EventTypeWarning
	}
	w.Recorder.Eventf(xa, nil, t, e.Reason, "Reconcile", "%s", redact.CutUTF8(e.Message, MaxEventNoteLength))
}

// update writes upd's status with an Update carrying upd's resourceVersion (so a claim keeps DESIGN rule 1).
// Every destination-supplied string is first cut to its status field's bound (Bound). When the API server
// still answers Invalid, the write is retried once with those strings dropped (Minimal), and after that write
// a Warning Event StatusTrimmed says so. An Invalid answer to the second write is ErrRefused. Other errors
// (Conflict, NotFound, unavailable) are returned as they are. Both writes hold one of the namespace's seats
// (Seats), waited for first; ctx ending during that wait is returned wrapped, and nothing is written.
func (w *Writer) update(ctx context.Context, upd *actionsv1alpha1.ExternalAction) error {
	Bound(&upd.Status)
	release, err := w.Seats.Take(ctx, upd.Namespace)
	if err != nil {
		return fmt.Errorf("waiting for a status-write seat of namespace %s: %w", upd.Namespace, err)
	}
	defer release()
	err = w.Client.Status().Update(ctx, upd)
	if !apierrors.IsInvalid(err) {
		return err
	}
	Minimal(&upd.Status, fmt.Sprintf("the API server refused the full status (%s); recorded without the "+
		"destination's response body, response headers and Retry-After", InvalidFields(err)))
	if err2 := w.Client.Status().Update(ctx, upd); err2 != nil {
		if apierrors.IsInvalid(err2) {
			return fmt.Errorf("%w (%s), also without the destination's values (%s)", ErrRefused,
				InvalidFields(err), InvalidFields(err2))
		}
		return err2
	}
	w.Event(upd, &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonStatusTrimmed, Message: upd.Status.LastError})
	return nil
}

// afterWrite runs once the status write of step succeeded (prev is the phase before it): it emits the step's
// event and, at a phase change only, logs it, moves the outcome_unknown gauge (GaugeUpdater's refresh corrects
// it), runs Finished and records the terminal metrics.
func (w *Writer) afterWrite(ctx context.Context, prev actionsv1alpha1.Phase, xa *actionsv1alpha1.ExternalAction,
	step ledger.Step, destID string) {
	if step.Event != nil {
		w.Event(xa, step.Event)
	}
	if destID == "" {
		destID = w.DestinationID(xa)
	}
	phase := step.Status.Phase
	if phase == prev {
		return // the terminal bookkeeping below is done once, at the transition
	}
	logPhaseChange(ctx, xa, prev, destID)
	switch actionsv1alpha1.PhaseOutcomeUnknown {
	case phase:
		metrics.OutcomeUnknown.Inc()
	case prev:
		metrics.OutcomeUnknown.Dec()
	}
	if !phase.Terminal() {
		return
	}
	if w.Finished != nil {
		w.Finished(xa)
	}
	metrics.ActionDuration.WithLabelValues(string(phase)).Observe(w.Clock.Since(xa.CreationTimestamp.Time).Seconds())
	if phase == actionsv1alpha1.PhaseExhausted {
		metrics.Exhausted.WithLabelValues(destID).Inc()
	}
}

// logPhaseChange logs a written phase change at info level with the condition reason that explains it. The
// action itself is named by ctx's logger ("externalaction", added by the reconcile and by every other caller
// of the writer), not again here: a JSON line with a key twice is read differently by each log pipeline.
func logPhaseChange(ctx context.Context, xa *actionsv1alpha1.ExternalAction, prev actionsv1alpha1.Phase, destID string) {
	reason := ""
	for _, c := range xa.Status.Conditions {
		if c.Type == actionsv1alpha1.ConditionReady {
			reason = c.Reason
		}
	}
	log.FromContext(ctx).Info("phase changed", "from", string(prev), "to", string(xa.Status.Phase),
		"reason", reason, "attempts", xa.Status.Attempts, "destination", destID)
}

// Bound cuts every string a destination can supply to its field's bound in the CRD, on a UTF-8 boundary:
// attemptHistory[].retryAfter, lastError, response header values, response body and condition messages.
func Bound(st *actionsv1alpha1.ExternalActionStatus) {
	for i := range st.AttemptHistory {
		st.AttemptHistory[i].RetryAfter = redact.CutUTF8(st.AttemptHistory[i].RetryAfter, actionsv1alpha1.MaxRetryAfterLength)
	}
	st.LastError = redact.CutUTF8(st.LastError, actionsv1alpha1.MaxLastErrorLength)
	if rec := st.Response; rec != nil {
		for k, v := range rec.Headers {
			rec.Headers[k] = redact.CutUTF8(v, actionsv1alpha1.MaxResponseHeaderValueLength)
		}
		if len(rec.Body) > actionsv1alpha1.MaxResponseBodyLength {
			rec.Body, rec.BodyTruncated = redact.CutUTF8(rec.Body, actionsv1alpha1.MaxResponseBodyLength), true
		}
	}
	for i := range st.Conditions {
		st.Conditions[i].Message = redact.CutUTF8(st.Conditions[i].Message, maxConditionMessageLength)
	}
}

// Minimal drops the destination-supplied strings of a status that the API server refused: the response keeps
// its status code and hash, loses body and headers (bodyTruncated true), Retry-After values go, and lastError
// carries note. Phase, conditions, claim and history (the decision) are kept.
func Minimal(st *actionsv1alpha1.ExternalActionStatus, note string) {
	if rec := st.Response; rec != nil {
		rec.Body, rec.Headers, rec.BodyTruncated = "", nil, true
	}
	for i := range st.AttemptHistory {
		st.AttemptHistory[i].RetryAfter = ""
	}
	st.LastError = redact.CutUTF8(note, actionsv1alpha1.MaxLastErrorLength)
}

// InvalidFields names the fields and causes of an Invalid error without their values (a value may come from
// the destination, and logs and events never carry one).
func InvalidFields(err error) string {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil || len(se.Status().Details.Causes) == 0 {
		return "invalid"
	}
	var parts []string
	for _, c := range se.Status().Details.Causes {
		parts = append(parts, fmt.Sprintf("%s: %s", c.Field, c.Type))
	}
	return redact.CutUTF8(strings.Join(parts, ", "), 512)
}

// sleepStep sleeps b's next step, or returns ctx's error, or an error when b has no step left.
func sleepStep(ctx context.Context, b *wait.Backoff) error {
	if b.Steps <= 0 {
		return errors.New("status write retries exhausted")
	}
	t := time.NewTimer(b.Step())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
