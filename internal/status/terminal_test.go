package status

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
)

// The Terminal hook (Writer.Terminal) runs on the status about to be written by Apply or Settle when that write
// ends the action (its phase changes to a terminal one), before the write, so that what it adds goes into the same
// write as the phase. These tests pin when it runs, what it is given, and what becomes of its additions when the
// write loses a Conflict.

// hookCall is what the hook saw.
type hookCall struct {
	key             types.NamespacedName
	resourceVersion string
	status          actionsv1alpha1.ExternalActionStatus
}

// terminalHook installs a Terminal hook on w that records its calls and, as the dead-letter hook does, adds a
// record to the status it is given (its message says which call made it).
func terminalHook(w *Writer) *[]hookCall {
	calls := &[]hookCall{}
	w.Terminal = func(_ context.Context, xa *actionsv1alpha1.ExternalAction) {
		*calls = append(*calls, hookCall{key: types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name},
			resourceVersion: xa.ResourceVersion, status: *xa.Status.DeepCopy()})
		xa.Status.DeadLetter = &actionsv1alpha1.DeadLetterStatus{Sink: "Destination/ns/sink", Phase: xa.Status.Phase,
			State: actionsv1alpha1.DeadLetterPending, Message: fmt.Sprintf("added by call %d", len(*calls))}
		// Changed in place, as Show changes a condition that is there: the step's own status must not see it.
		for i := range xa.Status.Conditions {
			xa.Status.Conditions[i].Message = "changed by the hook"
		}
	}
	return calls
}

// phaseStep is a step to phase with a Ready condition.
func phaseStep(phase actionsv1alpha1.Phase, lastError string) ledger.Step {
	return ledger.Step{Kind: ledger.KindNone, Status: &actionsv1alpha1.ExternalActionStatus{Phase: phase, LastError: lastError,
		Conditions: []metav1.Condition{{Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: string(phase),
			Message: "decided", LastTransitionTime: metav1.Now()}}}}
}

// Apply that ends the action runs the hook once, before the write, on the status it writes (the action's
// identity and the resourceVersion it was decided on): the hook's addition is in that write, and the step's own
// status is not changed. A later write in the same terminal phase, and an equal status, do not run it again.
func TestTerminalHookRunsOnceInTheWriteThatEndsTheAction(t *testing.T) {
	w, c, _ := newWriter(t, action())
	calls := terminalHook(w)
	finished := 0
	w.Finished = func(*actionsv1alpha1.ExternalAction) { finished++ }
	ctx := context.Background()
	cur, _ := currentAndStale(t, c)

	step := phaseStep(actionsv1alpha1.PhaseExhausted, "all attempts failed")
	upd, err := w.Apply(ctx, cur, step, "")
	if err != nil || upd == nil {
		t.Fatalf("Apply: %v, %v", upd, err)
	}
	if len(*calls) != 1 {
		t.Fatalf("the hook ran %d times, want 1", len(*calls))
	}
	got := (*calls)[0]
	if got.key != (types.NamespacedName{Namespace: "ns", Name: "a"}) || got.resourceVersion != cur.ResourceVersion ||
		got.status.Phase != actionsv1alpha1.PhaseExhausted || got.status.LastError != "all attempts failed" || got.status.DeadLetter != nil {
		t.Errorf("the hook got %+v; want ns/a at resourceVersion %s with the step's status", got, cur.ResourceVersion)
	}
	if dl := stored(t, c).Status.DeadLetter; dl == nil || dl.Message != "added by call 1" {
		t.Errorf("stored status.deadLetter %+v; want the hook's addition in the write that ended the action", dl)
	}
	if upd.Status.DeadLetter == nil || upd.ResourceVersion != stored(t, c).ResourceVersion {
		t.Errorf("Apply returned %+v; want the object as written, with the hook's addition", upd.Status.DeadLetter)
	}
	if step.Status.DeadLetter != nil || step.Status.Conditions[0].Message != "decided" {
		t.Error("the hook changed the step's own status")
	}
	if c := stored(t, c).Status.Conditions; len(c) != 1 || c[0].Message != "changed by the hook" {
		t.Errorf("stored conditions %+v; want the hook's change", c)
	}
	if finished != 1 {
		t.Errorf("Finished ran %d times, want 1", finished)
	}

	again := upd.Status.DeepCopy()
	again.LastError = "rewritten"
	upd2, err := w.Apply(ctx, upd, ledger.Step{Kind: ledger.KindNone, Status: again}, "")
	if err != nil || upd2 == nil || stored(t, c).Status.LastError != "rewritten" {
		t.Fatalf("second Apply in the same terminal phase: %v, %v", upd2, err)
	}
	if _, err := w.Apply(ctx, upd2, ledger.Step{Kind: ledger.KindNone, Status: upd2.Status.DeepCopy()}, ""); err != nil {
		t.Fatal(err)
	}
	if len(*calls) != 1 || finished != 1 {
		t.Errorf("after re-writes of the terminal status the hook ran %d times and Finished %d; want 1 each", len(*calls), finished)
	}
}

// The hook does not run for a write that leaves the action in a phase that is not terminal, whatever the operation.
func TestTerminalHookNotForNonTerminalPhases(t *testing.T) {
	for _, phase := range []actionsv1alpha1.Phase{actionsv1alpha1.PhasePending, actionsv1alpha1.PhaseInProgress} {
		t.Run(string(phase), func(t *testing.T) {
			if phase.Terminal() {
				t.Fatalf("%s is terminal", phase)
			}
			w, c, _ := newWriter(t, action())
			calls := terminalHook(w)
			cur, _ := currentAndStale(t, c)
			upd, err := w.Apply(context.Background(), cur, phaseStep(phase, "applied"), "")
			if err != nil || upd == nil {
				t.Fatalf("Apply: %v, %v", upd, err)
			}
			s := w.Settle(context.Background(), upd, func(*actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
				return phaseStep(phase, "settled"), true
			})
			if s.Written == nil {
				t.Fatalf("Settle = %+v", s)
			}
			if len(*calls) != 0 || stored(t, c).Status.DeadLetter != nil {
				t.Errorf("the hook ran %d times for phase %s, want 0", len(*calls), phase)
			}
		})
	}
}

// A write that moves the action from one terminal phase to another (a person resolves OutcomeUnknown) changes the
// phase to a terminal one: the hook runs, and decides for itself whether anything is owed.
func TestTerminalHookRunsOnAChangeBetweenTerminalPhases(t *testing.T) {
	w, c, _ := newWriter(t, action())
	cur, _ := currentAndStale(t, c)
	unknown, err := w.Apply(context.Background(), cur, phaseStep(actionsv1alpha1.PhaseOutcomeUnknown, ""), "")
	if err != nil || unknown == nil {
		t.Fatalf("Apply: %v, %v", unknown, err)
	}
	calls := terminalHook(w)
	if _, err := w.Apply(context.Background(), unknown, phaseStep(actionsv1alpha1.PhaseSucceeded, ""), ""); err != nil {
		t.Fatal(err)
	}
	if len(*calls) != 1 || (*calls)[0].status.Phase != actionsv1alpha1.PhaseSucceeded {
		t.Errorf("the hook ran %d times (%+v), want once for Succeeded", len(*calls), *calls)
	}
}

// An Apply that loses a Conflict writes nothing: the hook ran on the status that was to be written, but none of its
// additions is stored, no Event is emitted and Finished does not run. The next Apply on the current copy ends the
// action and runs the hook again: its addition goes in with the write that won.
func TestTerminalHookApplyConflictStoresNothing(t *testing.T) {
	w, c, rec := newWriter(t, action())
	calls := terminalHook(w)
	finished := 0
	w.Finished = func(*actionsv1alpha1.ExternalAction) { finished++ }
	ctx := context.Background()
	cur, stale := currentAndStale(t, c)
	moved, err := w.Apply(ctx, cur, waitStep("Moved"), "")
	if err != nil || moved == nil {
		t.Fatalf("Apply: %v, %v", moved, err)
	}
	<-rec.Events

	end := phaseStep(actionsv1alpha1.PhaseFailed, "rejected")
	end.Event = &ledger.Event{Warning: true, Reason: "Rejected", Message: "m"}
	if upd, err := w.Apply(ctx, stale, end, ""); upd != nil || err != nil {
		t.Fatalf("Apply on a stale copy = %v, %v; want nothing written and no error", upd, err)
	}
	if len(*calls) != 1 || (*calls)[0].resourceVersion != stale.ResourceVersion {
		t.Errorf("the hook ran %d times (%+v); want once, on the stale copy's write", len(*calls), *calls)
	}
	if got := stored(t, c); got.Status.DeadLetter != nil || got.Status.Phase != actionsv1alpha1.PhasePending {
		t.Errorf("stored phase %s, deadLetter %+v; want nothing of the lost write", got.Status.Phase, got.Status.DeadLetter)
	}
	select {
	case e := <-rec.Events:
		t.Errorf("the lost write emitted %q", e)
	default:
	}
	if finished != 0 {
		t.Errorf("Finished ran %d times for a lost write", finished)
	}

	upd, err := w.Apply(ctx, moved, end, "")
	if err != nil || upd == nil {
		t.Fatalf("Apply on the current copy: %v, %v", upd, err)
	}
	if dl := stored(t, c).Status.DeadLetter; len(*calls) != 2 || dl == nil || dl.Message != "added by call 2" {
		t.Errorf("after %d hook calls stored deadLetter %+v; want the second call's addition", len(*calls), dl)
	}
	if finished != 1 {
		t.Errorf("Finished ran %d times, want 1", finished)
	}
}

// Settle that ends the action runs the hook before its write: the addition is stored and in Written, not in the
// step's status (Settled.Step).
func TestTerminalHookSettle(t *testing.T) {
	w, c, _ := newWriter(t, action())
	calls := terminalHook(w)
	cur, _ := currentAndStale(t, c)
	s := w.Settle(context.Background(), cur, func(*actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
		return phaseStep(actionsv1alpha1.PhaseExhausted, "503"), true
	})
	if s.Written == nil || len(*calls) != 1 {
		t.Fatalf("Settle = %+v after %d hook calls; want written after one", s, len(*calls))
	}
	if dl := stored(t, c).Status.DeadLetter; dl == nil || s.Written.Status.DeadLetter == nil {
		t.Errorf("stored deadLetter %+v, written %+v; want the hook's addition in both", dl, s.Written.Status.DeadLetter)
	}
	if s.Step.Status.DeadLetter != nil || s.Step.Status.Conditions[0].Message != "decided" {
		t.Error("the hook changed the step's status")
	}
}

// A Settle whose first write loses a Conflict decides again on a fresh read: the hook runs again on the new
// decision, and the stored status carries that run's addition (never the lost one's) with the other writer's
// change kept. When the fresh copy is already in the terminal phase the decision keeps (another writer ended it),
// the write does not end the action and the hook does not run for it.
func TestTerminalHookSettleConflict(t *testing.T) {
	endOver := func(st *actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
		next := st.DeepCopy()
		next.Phase = actionsv1alpha1.PhaseExhausted
		return ledger.Step{Kind: ledger.KindNone, Status: next}, true
	}
	t.Run("decided again", func(t *testing.T) {
		w, c, _ := newWriter(t, action())
		calls := terminalHook(w)
		ctx := context.Background()
		cur, stale := currentAndStale(t, c)
		if _, err := w.Apply(ctx, cur, waitStep("Moved"), ""); err != nil {
			t.Fatal(err)
		}
		s := w.Settle(ctx, stale, endOver)
		if s.Written == nil {
			t.Fatalf("Settle = %+v", s)
		}
		if len(*calls) != 2 || (*calls)[0].resourceVersion == (*calls)[1].resourceVersion {
			t.Fatalf("the hook ran %d times (%+v); want once per decision, on the stale and the fresh copy", len(*calls), *calls)
		}
		got := stored(t, c)
		if got.Status.DeadLetter == nil || got.Status.DeadLetter.Message != "added by call 2" || got.Status.LastError != "waiting" {
			t.Errorf("stored deadLetter %+v, lastError %q; want the second call's addition over the newer copy", got.Status.DeadLetter,
				got.Status.LastError)
		}
	})
	t.Run("ended by another writer", func(t *testing.T) {
		w, c, _ := newWriter(t, action())
		ctx := context.Background()
		cur, stale := currentAndStale(t, c)
		if _, err := w.Apply(ctx, cur, phaseStep(actionsv1alpha1.PhaseExhausted, "ended elsewhere"), ""); err != nil {
			t.Fatal(err)
		}
		calls := terminalHook(w)
		s := w.Settle(ctx, stale, endOver)
		if s.Written == nil {
			t.Fatalf("Settle = %+v", s)
		}
		if len(*calls) != 1 || (*calls)[0].resourceVersion != stale.ResourceVersion {
			t.Errorf("the hook ran %d times (%+v); want only for the stale copy's lost write", len(*calls), *calls)
		}
		if got := stored(t, c); got.Status.DeadLetter != nil || !strings.Contains(got.Status.LastError, "ended elsewhere") {
			t.Errorf("stored deadLetter %+v, lastError %q; want no addition over the status another writer ended",
				got.Status.DeadLetter, got.Status.LastError)
		}
	})
}
