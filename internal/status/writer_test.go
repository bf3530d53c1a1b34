package status

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
)

func newWriter(t *testing.T, objs ...client.Object) (*Writer, client.Client, *events.FakeRecorder) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(objs...).Build()
	rec := events.NewFakeRecorder(10)
	return &Writer{Client: c, Reader: c, Recorder: rec, Clock: clock.RealClock{},
		DestinationID: func(*actionsv1alpha1.ExternalAction) string { return "Destination/ns/d" }}, c, rec
}

// currentAndStale reads the action and returns it with a copy that goes stale once the first is written.
func currentAndStale(t *testing.T, c client.Client) (cur, stale *actionsv1alpha1.ExternalAction) {
	t.Helper()
	cur = &actionsv1alpha1.ExternalAction{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(action()), cur); err != nil {
		t.Fatal(err)
	}
	return cur, cur.DeepCopy()
}

func action() *actionsv1alpha1.ExternalAction {
	return &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Generation: 1},
		Spec: actionsv1alpha1.ExternalActionSpec{DestinationRef: actionsv1alpha1.DestinationReference{Name: "d"}}}
}

func waitStep(reason string) ledger.Step {
	st := &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhasePending, LastError: "waiting"}
	return ledger.Step{Kind: ledger.KindWait, Status: st, Event: &ledger.Event{Warning: true, Reason: reason, Message: "m"}}
}

// Apply on a stale copy writes nothing and emits nothing (its Event would announce a transition that lost);
// on the current copy it writes and emits once.
func TestApplyConflictEmitsNothing(t *testing.T) {
	w, c, rec := newWriter(t, action())
	ctx := context.Background()
	cur, stale := currentAndStale(t, c)
	upd, err := w.Apply(ctx, cur, waitStep("First"), "")
	if err != nil || upd == nil {
		t.Fatalf("Apply on the current copy: %v, %v", upd, err)
	}
	if upd, err := w.Apply(ctx, stale, waitStep("Second"), ""); err != nil || upd != nil {
		t.Fatalf("Apply on a stale copy: %v, %v; want nothing written and no error", upd, err)
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 1 || !strings.Contains(got[0], "First") {
		t.Fatalf("events %q, want exactly the one of the write that won", got)
	}
}

// A claim decided on a stale copy is ErrClaimLost: nothing may be sent.
func TestClaimConflictIsLost(t *testing.T) {
	w, c, _ := newWriter(t, action())
	ctx := context.Background()
	cur, stale := currentAndStale(t, c)
	if _, err := w.Apply(ctx, cur, waitStep("Moved"), ""); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now())
	st := &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseInProgress, Attempts: 1,
		Claim: &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "h", StartedAt: now, ExpiresAt: now}}
	if _, err := w.Claim(ctx, stale, ledger.Step{Kind: ledger.KindSend, Status: st}); !errors.Is(err, ErrClaimLost) {
		t.Fatalf("Claim on a stale copy: %v, want ErrClaimLost", err)
	}
}

// Settle decides again on a fresh read after a Conflict, and reports Closed when the fresh copy has nothing to
// settle.
func TestSettleDecidesAgainOnFreshRead(t *testing.T) {
	w, c, _ := newWriter(t, action())
	ctx := context.Background()
	cur, stale := currentAndStale(t, c)
	if _, err := w.Apply(ctx, cur, waitStep("Moved"), ""); err != nil {
		t.Fatal(err)
	}
	calls := 0
	s := w.Settle(ctx, stale, func(st *actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
		calls++
		if st.LastError != "waiting" {
			return ledger.Step{Status: &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhasePending}}, true
		}
		return ledger.Step{}, false // the fresh copy: settled elsewhere
	})
	if !s.Closed || s.Written != nil || calls != 2 {
		t.Fatalf("Settle = %+v after %d decisions; want Closed after deciding again on the fresh copy", s, calls)
	}
}

func TestBound(t *testing.T) {
	long := strings.Repeat("é", 5000) // 10000 bytes
	st := &actionsv1alpha1.ExternalActionStatus{
		AttemptHistory: []actionsv1alpha1.AttemptRecord{{Number: 1, RetryAfter: strings.Repeat("9", 200)}},
		LastError:      long,
		Response: &actionsv1alpha1.ResponseRecord{StatusCode: 503, Body: long,
			Headers: map[string]string{"Location": long}},
	}
	Bound(st)
	if got := st.AttemptHistory[0].RetryAfter; len(got) != actionsv1alpha1.MaxRetryAfterLength {
		t.Errorf("retryAfter has %d bytes", len(got))
	}
	for name, v := range map[string]string{"lastError": st.LastError, "body": st.Response.Body, "Location": st.Response.Headers["Location"]} {
		if !utf8.ValidString(v) || len(v) > actionsv1alpha1.MaxResponseBodyLength {
			t.Errorf("%s: %d bytes, valid UTF-8 %v", name, len(v), utf8.ValidString(v))
		}
	}
	if len(st.Response.Headers["Location"]) > actionsv1alpha1.MaxResponseHeaderValueLength || !st.Response.BodyTruncated ||
		len(st.LastError) > actionsv1alpha1.MaxLastErrorLength {
		t.Errorf("bounds not applied: %d, %v, %d", len(st.Response.Headers["Location"]), st.Response.BodyTruncated, len(st.LastError))
	}
}

// Apply does not rewrite a status with equal content: no write (the resourceVersion stays), no Event.
func TestApplyEqualStatusWritesNothing(t *testing.T) {
	w, c, rec := newWriter(t, action())
	ctx := context.Background()
	cur, _ := currentAndStale(t, c)
	upd, err := w.Apply(ctx, cur, waitStep("First"), "")
	if err != nil || upd == nil {
		t.Fatalf("first Apply: %v, %v", upd, err)
	}
	<-rec.Events
	again, err := w.Apply(ctx, upd, waitStep("First"), "")
	if err != nil || again == nil || again.ResourceVersion != upd.ResourceVersion {
		t.Fatalf("second Apply with the same status: %v, %v; want the object unchanged", again, err)
	}
	stored := &actionsv1alpha1.ExternalAction{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(upd), stored); err != nil || stored.ResourceVersion != upd.ResourceVersion {
		t.Fatalf("stored resourceVersion %s, want %s (no second write): %v", stored.ResourceVersion, upd.ResourceVersion, err)
	}
	select {
	case e := <-rec.Events:
		t.Errorf("an equal status emitted %q", e)
	default:
	}
}

// countingReader counts the Gets that reach the API server (Writer.Reader).
type countingReader struct {
	client.Reader
	gets int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets++
	return r.Reader.Get(ctx, key, obj, opts...)
}

// claimedAction writes attempt 1's claim over the stored action and returns the copy as read before the claim
// (what a lagging cache shows), the copy the claim write returned, and the Reader's Get counter.
func claimedAction(t *testing.T) (w *Writer, c client.Client, before, claimed *actionsv1alpha1.ExternalAction, reads *countingReader) {
	t.Helper()
	w, c, _ = newWriter(t, action())
	reads = &countingReader{Reader: w.Reader}
	w.Reader = reads
	before, _ = currentAndStale(t, c)
	now := metav1.NewTime(time.Now())
	st := &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseInProgress, Attempts: 1,
		Claim: &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "h", StartedAt: now, ExpiresAt: metav1.NewTime(now.Add(time.Minute))}}
	claimed, err := w.Claim(context.Background(), before, ledger.Step{Kind: ledger.KindSend, Status: st})
	if err != nil {
		t.Fatal(err)
	}
	return w, c, before, claimed, reads
}

// recordAttempt1 settles attempt 1 as Succeeded when its claim is open, keeping the rest of the status (so a
// write over a copy shows which copy it was decided on); nothing to settle otherwise.
func recordAttempt1(st *actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
	if st.Claim == nil || st.Claim.Attempt != 1 {
		return ledger.Step{}, false
	}
	next := st.DeepCopy()
	next.Phase, next.Claim = actionsv1alpha1.PhaseSucceeded, nil
	return ledger.Step{Kind: ledger.KindNone, Status: next}, true
}

func stored(t *testing.T, c client.Client) *actionsv1alpha1.ExternalAction {
	t.Helper()
	xa := &actionsv1alpha1.ExternalAction{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(action()), xa); err != nil {
		t.Fatal(err)
	}
	return xa
}

// An outcome whose claim the cached copy does not show yet is written over the copy the claim write returned:
// no read from the API server when nothing changed since the claim, and that copy is left as it was.
func TestSettleClaimedWritesOverTheClaimWithoutARead(t *testing.T) {
	w, c, before, claimed, reads := claimedAction(t)
	kept := claimed.DeepCopy()
	s := w.SettleClaimed(context.Background(), before, claimed, recordAttempt1)
	if s.Written == nil || s.Written.Status.Phase != actionsv1alpha1.PhaseSucceeded {
		t.Fatalf("SettleClaimed = %+v; want the outcome written", s)
	}
	if reads.gets != 0 {
		t.Errorf("%d reads from the API server; want 0 (the claim's copy was current)", reads.gets)
	}
	if got := stored(t, c); got.Status.Phase != actionsv1alpha1.PhaseSucceeded || got.ResourceVersion != s.Written.ResourceVersion {
		t.Errorf("stored phase %s at %s; want Succeeded at %s", got.Status.Phase, got.ResourceVersion, s.Written.ResourceVersion)
	}
	if !equality.Semantic.DeepEqual(claimed, kept) {
		t.Error("SettleClaimed changed the claim's copy")
	}
}

// When the object changed after the claim, the write over the claim's copy is a Conflict: the outcome is then
// decided again on a fresh read and written over it (the change kept).
func TestSettleClaimedConflictReadsAndWritesOverTheNewer(t *testing.T) {
	w, c, before, claimed, reads := claimedAction(t)
	moved := claimed.DeepCopy()
	moved.Status.LastError = "changed after the claim"
	if err := c.Status().Update(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	s := w.SettleClaimed(context.Background(), before, claimed, recordAttempt1)
	if s.Written == nil || reads.gets != 1 {
		t.Fatalf("SettleClaimed = %+v after %d reads; want the outcome written after one read", s, reads.gets)
	}
	got := stored(t, c)
	if got.Status.Phase != actionsv1alpha1.PhaseSucceeded || got.Status.LastError != "changed after the claim" {
		t.Errorf("stored phase %s, lastError %q; want Succeeded decided on the newer copy", got.Status.Phase, got.Status.LastError)
	}
}

// Nothing to settle on the claim's copy is not Closed: only a fresh read may say the attempt was settled
// elsewhere; and an attempt closed after the claim (a Conflict, then nothing to settle on the fresh read) is
// Closed without a write.
func TestSettleClaimedClosesOnlyOnAFreshRead(t *testing.T) {
	w, c, before, claimed, reads := claimedAction(t)
	decisions := 0
	s := w.SettleClaimed(context.Background(), before, claimed, func(*actionsv1alpha1.ExternalActionStatus) (ledger.Step, bool) {
		decisions++
		return ledger.Step{}, false
	})
	if !s.Closed || reads.gets != 1 || decisions != 3 {
		t.Fatalf("SettleClaimed = %+v after %d reads and %d decisions; want Closed on the fresh read", s, reads.gets, decisions)
	}
	closed := stored(t, c)
	closed.Status.Claim, closed.Status.Phase = nil, actionsv1alpha1.PhaseOutcomeUnknown
	if err := c.Status().Update(context.Background(), closed); err != nil {
		t.Fatal(err)
	}
	reads.gets = 0
	s = w.SettleClaimed(context.Background(), before, claimed, recordAttempt1)
	if !s.Closed || s.Written != nil || reads.gets != 1 {
		t.Fatalf("SettleClaimed = %+v after %d reads; want Closed after one read", s, reads.gets)
	}
	if got := stored(t, c); got.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown {
		t.Errorf("stored phase %s; want the resolution made elsewhere kept", got.Status.Phase)
	}
}
