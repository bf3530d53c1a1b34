package subject

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/metrics"
)

// The Lease name is "xa-subject-" and the first 20 hex digits of the SHA-256 of the subject (docs/concepts.md),
// a valid object name for any subject up to its 253 characters.
func TestLeaseName(t *testing.T) {
	for _, tc := range []struct{ subject, want string }{
		{"order/19", "xa-subject-a052304aee001d33ef72"}, // printf order/19 | sha256sum
		{"", "xa-subject-e3b0c44298fc1c149afb"},         // the SHA-256 of nothing
	} {
		if got := LeaseName(tc.subject); got != tc.want {
			t.Errorf("LeaseName(%q) = %q, want %q", tc.subject, got, tc.want)
		}
	}
	if LeaseName("order/19") == LeaseName("order/190") {
		t.Error("two subjects share a Lease name")
	}
	long := LeaseName(strings.Repeat("Ü/", 126) + "x") // 253 characters, not a valid name itself
	if errs := validation.IsDNS1123Subdomain(long); len(errs) > 0 {
		t.Errorf("LeaseName of a long subject = %q, not an object name: %v", long, errs)
	}
}

// Creation order: creationTimestamp, then name; an action is never before itself.
func TestCreatedBefore(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b *actionsv1alpha1.ExternalAction
		want bool
	}{
		{"earlier second", action("zeta", t0), action("alpha", t0.Add(time.Second)), true},
		{"later second", action("alpha", t0.Add(time.Second)), action("zeta", t0), false},
		{"same second, smaller name", action("charge", t0), action("refund", t0), true},
		{"same second, greater name", action("refund", t0), action("charge", t0), false},
		{"the same action", action("charge", t0), action("charge", t0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := createdBefore(tc.a, tc.b); got != tc.want {
				t.Errorf("createdBefore = %v, want %v", got, tc.want)
			}
		})
	}
}

// holdCase is one decision of Hold for the action refund (created at t0+1m) among objs.
type holdCase struct {
	name string
	objs []client.Object
	// wantReason is the Wait's reason ("" for no Wait: the action holds its subject).
	wantReason string
	// wantMsg are parts of the Wait's message.
	wantMsg []string
	// wantHolder is the Lease's holderIdentity after Hold ("" for no Lease).
	wantHolder string
}

var refundCreated = t0.Add(time.Minute)

// holdOrderCases: creation order, checked from the cache before the Lease is taken.
func holdOrderCases() []holdCase {
	pa := actionsv1alpha1.PhaseInProgress
	return []holdCase{
		{name: "a free subject: the Lease is created naming the action", wantHolder: id("refund")},
		{name: "an earlier Pending action goes first", objs: []client.Object{action("charge", t0)},
			wantReason: actionsv1alpha1.ReasonWaitingForSubject,
			wantMsg:    []string{`subject "order/19"`, "ExternalAction charge was created earlier"}},
		{name: "an earlier InProgress action goes first", objs: []client.Object{action("charge", t0, phase(pa))},
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantMsg: []string{"charge was created earlier"}},
		{name: "the earliest of several is named", objs: []client.Object{action("b", t0.Add(time.Second)), action("a", t0.Add(2*time.Second)), action("c", t0)},
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantMsg: []string{"ExternalAction c was created earlier"}},
		{name: "an earlier finished action is not waited for", objs: []client.Object{action("charge", t0, phase(actionsv1alpha1.PhaseSucceeded))},
			wantHolder: id("refund")},
		{name: "an earlier OutcomeUnknown action that does not hold the Lease is not waited for (it is terminal)",
			objs: []client.Object{action("charge", t0, phase(actionsv1alpha1.PhaseOutcomeUnknown))}, wantHolder: id("refund")},
		{name: "an earlier action being deleted is not waited for", objs: []client.Object{action("charge", t0, deleting)},
			wantHolder: id("refund")},
		{name: "an earlier action in another namespace is not waited for", objs: []client.Object{action("charge", t0, inNamespace("bank"))},
			wantHolder: id("refund")},
		{name: "an earlier action on another subject is not waited for", objs: []client.Object{action("charge", t0, onSubject("order/20"))},
			wantHolder: id("refund")},
		{name: "a later action is not waited for", objs: []client.Object{action("charge", refundCreated.Add(time.Second))},
			wantHolder: id("refund")},
		{name: "same second: the smaller name goes first", objs: []client.Object{action("charge", refundCreated)},
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantMsg: []string{"charge was created earlier"}},
		{name: "same second: a greater name goes after", objs: []client.Object{action("zeta", refundCreated)},
			wantHolder: id("refund")},
		{name: "the holder never waits in line: a touch", objs: []client.Object{action("charge", t0), lease(id("refund"))},
			wantHolder: id("refund")},
		{name: "the line is checked before a take-over too", objs: []client.Object{action("charge", t0), lease(id("gone"))},
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantMsg: []string{"charge was created earlier"}, wantHolder: id("gone")},
		{name: "a Lease of the subject in another namespace is not ours to wait for",
			objs:       []client.Object{lease(id("late"), func(l *coordinationv1.Lease) { l.Namespace = "bank" }), action("late", t0.Add(time.Hour), inNamespace("bank"), claimed)},
			wantHolder: id("refund")},
	}
}

// holdHolderCases: the Lease is held by another action (created after refund, so creation order does not
// decide); it is taken over only when a fresh read shows the holder can send no more.
func holdHolderCases() []holdCase {
	late := refundCreated.Add(time.Hour)
	held := func(holder *actionsv1alpha1.ExternalAction) []client.Object {
		return []client.Object{holder, lease(id(holder.Name))}
	}
	waits := []string{`subject "order/19" is held by ExternalAction late`, "until it finishes, is resolved or is deleted"}
	cases := []holdCase{
		{name: "holder Pending", objs: held(action("late", late)),
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantMsg: waits, wantHolder: id("late")},
		{name: "holder InProgress with its claim open", objs: held(action("late", late, phase(actionsv1alpha1.PhaseInProgress), claimed)),
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantMsg: waits, wantHolder: id("late")},
		{name: "holder Succeeded but its claim still open", objs: held(action("late", late, phase(actionsv1alpha1.PhaseSucceeded), claimed)),
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantMsg: waits, wantHolder: id("late")},
		{name: "holder OutcomeUnknown: a person must decide", objs: held(action("late", late, phase(actionsv1alpha1.PhaseOutcomeUnknown))),
			wantReason: actionsv1alpha1.ReasonSubjectOutcomeUnknown, wantHolder: id("late"), wantMsg: []string{
				"held by ExternalAction late, whose outcome is unknown",
				"annotate late with actions.actionledger.dev/resolve=applied", "not-applied", "retry", "or delete it"}},
		{name: "holder being deleted with its claim open", objs: held(action("late", late, deleting, claimed)),
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantMsg: waits, wantHolder: id("late")},
		{name: "holder being deleted without a claim: taken over", objs: held(action("late", late, deleting)), wantHolder: id("refund")},
		{name: "holder gone: taken over", objs: []client.Object{lease(id("late"))}, wantHolder: id("refund")},
		{name: "holder re-created with another UID: taken over", objs: []client.Object{action("late", late, withUID("uid-new")), lease(id("late"))},
			wantHolder: id("refund")},
		{name: "holder of that name only in another namespace: taken over", objs: []client.Object{action("late", late, inNamespace("bank")), lease(id("late"))},
			wantHolder: id("refund")},
		{name: "no holderIdentity: taken over", objs: []client.Object{lease("")}, wantHolder: id("refund")},
		{name: "holderIdentity without a UID: taken over", objs: []client.Object{action("late", late), lease("late")}, wantHolder: id("refund")},
		{name: "holderIdentity without a name: taken over", objs: []client.Object{lease("/uid-late")}, wantHolder: id("refund")},
	}
	for _, p := range []actionsv1alpha1.Phase{actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.PhaseFailed,
		actionsv1alpha1.PhaseExhausted, actionsv1alpha1.PhaseConflict} {
		cases = append(cases, holdCase{name: "holder " + string(p) + " and recorded: taken over",
			objs: held(action("late", late, phase(p))), wantHolder: id("refund")})
	}
	return cases
}

func TestHold(t *testing.T) {
	now := t0.Add(2 * time.Hour)
	for _, tc := range append(holdOrderCases(), holdHolderCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			xa := action("refund", refundCreated)
			l, c := fakeLock(t, append([]client.Object{xa}, tc.objs...), interceptor.Funcs{})
			w, err := l.Hold(context.Background(), xa, now)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantReason == "" && w != nil:
				t.Errorf("Hold = %+v, want the subject held", *w)
			case tc.wantReason != "" && w == nil:
				t.Errorf("Hold held the subject, want a wait with reason %s", tc.wantReason)
			case w != nil:
				if w.Reason != tc.wantReason || w.After != recheck {
					t.Errorf("Hold = %q after %v, want %q after %v", w.Reason, w.After, tc.wantReason, recheck)
				}
				for _, part := range tc.wantMsg {
					if !strings.Contains(w.Message, part) {
						t.Errorf("message %q does not say %q", w.Message, part)
					}
				}
			}
			if got := holderOf(getLease(t, c)); got != tc.wantHolder {
				t.Errorf("Lease holder = %q, want %q", got, tc.wantHolder)
			}
		})
	}
}

// A created Lease carries the subject's hash label, the managed-by label and the subject in full, holder,
// acquire and renew times from the Lock's clock, and no duration (the hold does not expire by time).
func TestHoldCreatesLease(t *testing.T) {
	xa := action("refund", refundCreated)
	l, c := fakeLock(t, []client.Object{xa}, interceptor.Funcs{})
	if w, err := l.Hold(context.Background(), xa, t0.Add(2*time.Hour)); err != nil || w != nil {
		t.Fatalf("Hold = %v, %v", w, err)
	}
	got := getLease(t, c)
	if v := got.Labels[LabelHash]; v != "a052304aee001d33ef72" {
		t.Errorf("label %s = %q", LabelHash, v)
	}
	if v := got.Labels["app.kubernetes.io/managed-by"]; v != "actionledger" {
		t.Errorf("managed-by label = %q", v)
	}
	if v := got.Annotations[Annotation]; v != subj {
		t.Errorf("annotation %s = %q, want %q", Annotation, v, subj)
	}
	if got.Spec.LeaseDurationSeconds != nil {
		t.Errorf("leaseDurationSeconds = %d, want unset", *got.Spec.LeaseDurationSeconds)
	}
	for n, ts := range map[string]*metav1.MicroTime{"acquireTime": got.Spec.AcquireTime, "renewTime": got.Spec.RenewTime} {
		if ts == nil || !ts.Time.Equal(clockAt) {
			t.Errorf("%s = %v, want %v", n, ts, clockAt)
		}
	}
}

// A take-over names the action, stamps acquire and renew times with now and counts a transition; a touch of
// one's own hold renews it only.
func TestHoldTakeOverAndTouch(t *testing.T) {
	now := t0.Add(2 * time.Hour)
	before := t0.Add(-time.Hour)
	old := lease(id("late"), func(l *coordinationv1.Lease) {
		l.Spec.LeaseTransitions = new(int32(2))
		l.Spec.AcquireTime, l.Spec.RenewTime = ptrMicro(before), ptrMicro(before)
	})
	xa := action("refund", refundCreated)
	l, c := fakeLock(t, []client.Object{xa, old, action("late", now, phase(actionsv1alpha1.PhaseSucceeded))}, interceptor.Funcs{})
	if w, err := l.Hold(context.Background(), xa, now); err != nil || w != nil {
		t.Fatalf("Hold = %v, %v", w, err)
	}
	got := getLease(t, c)
	if holderOf(got) != id("refund") || got.Spec.LeaseTransitions == nil || *got.Spec.LeaseTransitions != 3 ||
		!got.Spec.AcquireTime.Time.Equal(now) || !got.Spec.RenewTime.Time.Equal(now) {
		t.Errorf("after the take-over: holder %q, transitions %v, acquired %v, renewed %v; want %q, 3, %v, %v",
			holderOf(got), got.Spec.LeaseTransitions, got.Spec.AcquireTime, got.Spec.RenewTime, id("refund"), now, now)
	}

	later := now.Add(time.Minute)
	if w, err := l.Hold(context.Background(), xa, later); err != nil || w != nil {
		t.Fatalf("Hold again = %v, %v", w, err)
	}
	touched := getLease(t, c)
	if touched.ResourceVersion == got.ResourceVersion {
		t.Error("a touch did not write the Lease")
	}
	if *touched.Spec.LeaseTransitions != 3 || !touched.Spec.AcquireTime.Time.Equal(now) || !touched.Spec.RenewTime.Time.Equal(later) {
		t.Errorf("after the touch: transitions %d, acquired %v, renewed %v; want 3, %v, %v",
			*touched.Spec.LeaseTransitions, touched.Spec.AcquireTime, touched.Spec.RenewTime, now, later)
	}
}

// Another writer moving first (AlreadyExists, Conflict, NotFound on the write) makes Hold read and decide
// again; after subjectTakeTries lost writes it asks to be called again soon, with nothing to record.
func TestHoldRaces(t *testing.T) {
	late := refundCreated.Add(time.Hour)
	rival := action("late", late, phase(actionsv1alpha1.PhaseInProgress), claimed)
	// first runs rival only before the first write of Hold.
	first := func(rival func(context.Context, client.WithWatch) error) func(context.Context, client.WithWatch, int) error {
		return func(ctx context.Context, c client.WithWatch, n int) error {
			if n > 1 {
				return nil
			}
			if err := rival(ctx, c); err != nil {
				t.Fatalf("the rival's write: %v", err)
			}
			return nil
		}
	}
	setHolder := func(holder string) func(context.Context, client.WithWatch) error {
		return func(ctx context.Context, c client.WithWatch) error {
			l := getLease(t, c)
			l.Spec.HolderIdentity = &holder
			return c.Update(ctx, l)
		}
	}
	for _, tc := range []struct {
		name string
		objs []client.Object
		// race runs before the n-th write of Hold on the fake client without interceptors; an error it returns
		// is that write's answer instead.
		race       func(ctx context.Context, c client.WithWatch, n int) error
		wantReason string
		wantAfter  time.Duration
		wantHolder string
		wantWrites int
	}{
		{name: "a rival creates the Lease first: refund waits for it", objs: []client.Object{rival},
			race:       first(func(ctx context.Context, c client.WithWatch) error { return c.Create(ctx, lease(id("late"))) }),
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantAfter: recheck, wantHolder: id("late"), wantWrites: 1},
		{name: "a rival takes the Lease over first: the stale take-over loses", objs: []client.Object{rival, lease(id("gone"))},
			race:       first(setHolder(id("late"))),
			wantReason: actionsv1alpha1.ReasonWaitingForSubject, wantAfter: recheck, wantHolder: id("late"), wantWrites: 1},
		{name: "the Lease is released under a take-over: created afresh", objs: []client.Object{lease(id("gone"))},
			race:       first(func(ctx context.Context, c client.WithWatch) error { return c.Delete(ctx, lease(id("gone"))) }),
			wantHolder: id("refund"), wantWrites: 2},
		{name: "our touch loses to a newer write: read and decide again", objs: []client.Object{lease(id("refund"))},
			race:       first(setHolder(id("refund"))),
			wantHolder: id("refund"), wantWrites: 2},
		{name: "every write loses: look again soon, nothing to record",
			race: func(context.Context, client.WithWatch, int) error {
				return apierrors.NewAlreadyExists(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, LeaseName(subj))
			},
			wantAfter: takeRetry, wantWrites: subjectTakeTries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xa := action("refund", refundCreated)
			writes := 0
			write := func(ctx context.Context, c client.WithWatch, do func() error) error {
				writes++
				if err := tc.race(ctx, c, writes); err != nil {
					return err
				}
				return do()
			}
			l, c := fakeLock(t, append([]client.Object{xa}, tc.objs...), interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
					return write(ctx, c, func() error { return c.Create(ctx, o, opts...) })
				},
				Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
					return write(ctx, c, func() error { return c.Update(ctx, o, opts...) })
				},
			})
			w, err := l.Hold(context.Background(), xa, t0.Add(2*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			gotReason, gotAfter := "", time.Duration(0)
			if w != nil {
				gotReason, gotAfter = w.Reason, w.After
			}
			if gotReason != tc.wantReason || gotAfter != tc.wantAfter {
				t.Errorf("Hold = reason %q after %v, want %q after %v", gotReason, gotAfter, tc.wantReason, tc.wantAfter)
			}
			if got := holderOf(getLease(t, c)); got != tc.wantHolder {
				t.Errorf("Lease holder = %q, want %q", got, tc.wantHolder)
			}
			if writes != tc.wantWrites {
				t.Errorf("Hold wrote %d times, want %d", writes, tc.wantWrites)
			}
		})
	}
}

// A read or write the API server refuses for another reason than a race is returned, wrapped, and nothing
// is held.
func TestHoldErrors(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "x", errors.New("rbac"))
	deny := func(match func(client.Object) bool) func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return func(ctx context.Context, c client.WithWatch, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
			if match(o) {
				return forbidden
			}
			return c.Get(ctx, key, o, opts...)
		}
	}
	isLease := func(o client.Object) bool { _, ok := o.(*coordinationv1.Lease); return ok }
	isAction := func(o client.Object) bool { _, ok := o.(*actionsv1alpha1.ExternalAction); return ok }
	for _, tc := range []struct {
		name  string
		objs  []client.Object
		funcs interceptor.Funcs
		want  string
	}{
		{name: "reading the Lease", funcs: interceptor.Funcs{Get: deny(isLease)}, want: `reading the Lease of subject "order/19"`},
		{name: "reading the holder", objs: []client.Object{lease(id("late"))}, funcs: interceptor.Funcs{Get: deny(isAction)},
			want: "reading the holder late of subject Lease " + LeaseName(subj)},
		{name: "listing the line", funcs: interceptor.Funcs{
			List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
				return forbidden
			},
		}, want: `listing the actions of subject "order/19"`},
		{name: "creating the Lease", funcs: interceptor.Funcs{
			Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return forbidden },
		}, want: `taking the Lease of subject "order/19"`},
		{name: "updating the Lease", objs: []client.Object{lease(id("refund"))}, funcs: interceptor.Funcs{
			Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error { return forbidden },
		}, want: `taking the Lease of subject "order/19"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xa := action("refund", refundCreated)
			l, _ := fakeLock(t, append([]client.Object{xa}, tc.objs...), tc.funcs)
			w, err := l.Hold(context.Background(), xa, t0.Add(2*time.Hour))
			if w != nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Hold = %v, %v; want a wrapped Forbidden saying %q", w, err, tc.want)
			}
		})
	}
}

// Release deletes the Lease only when the action holds it, with the resourceVersion it read as a
// precondition; a Lease that changed in between is left to its new writer.
func TestRelease(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "x", errors.New("rbac"))
	for _, tc := range []struct {
		name       string
		xa         *actionsv1alpha1.ExternalAction
		objs       []client.Object
		funcs      interceptor.Funcs
		wantErr    string
		wantHolder string
	}{
		{name: "the holder releases", xa: action("refund", t0), objs: []client.Object{lease(id("refund"))}},
		{name: "no Lease", xa: action("refund", t0)},
		{name: "another holder keeps it", xa: action("refund", t0), objs: []client.Object{lease(id("charge"))}, wantHolder: id("charge")},
		{name: "an earlier object of the same name keeps it", xa: action("refund", t0, withUID("uid-new")),
			objs: []client.Object{lease(id("refund"))}, wantHolder: id("refund")},
		{name: "an action without a subject touches nothing", xa: action("refund", t0, onSubject("")),
			objs: []client.Object{lease(id("refund"))}, wantHolder: id("refund")},
		{name: "the Lease changed after it was read: left alone", xa: action("refund", t0), objs: []client.Object{lease(id("refund"))},
			funcs: interceptor.Funcs{Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
				l := getLease(t, c)
				l.Spec.HolderIdentity = new(id("charge"))
				if err := c.Update(ctx, l); err != nil {
					t.Fatal(err)
				}
				return c.Delete(ctx, o, opts...)
			}},
			wantHolder: id("charge")},
		{name: "the delete is refused", xa: action("refund", t0), objs: []client.Object{lease(id("refund"))},
			funcs: interceptor.Funcs{Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
				return forbidden
			}},
			wantErr: `releasing the Lease of subject "order/19"`, wantHolder: id("refund")},
		{name: "the read is refused", xa: action("refund", t0), objs: []client.Object{lease(id("refund"))},
			funcs: interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return forbidden
			}},
			wantErr: `reading the Lease of subject "order/19" to release it`, wantHolder: id("refund")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := fakeLock(t, tc.objs, tc.funcs)
			err := l.Release(context.Background(), tc.xa)
			if tc.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tc.wantErr != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Release = %v, want a wrapped Forbidden saying %q", err, tc.wantErr)
			}
			if got := holderOf(getLease(t, c)); got != tc.wantHolder {
				t.Errorf("Lease holder after Release = %q, want %q", got, tc.wantHolder)
			}
		})
	}
}

// Releasable: a terminal outcome recorded (no open claim), except OutcomeUnknown, which keeps the subject.
func TestReleasable(t *testing.T) {
	for _, tc := range []struct {
		phase   actionsv1alpha1.Phase
		claimed bool
		want    bool
	}{
		{"", false, false},
		{actionsv1alpha1.PhasePending, false, false},
		{actionsv1alpha1.PhaseInProgress, true, false},
		{actionsv1alpha1.PhaseInProgress, false, false},
		{actionsv1alpha1.PhaseSucceeded, false, true},
		{actionsv1alpha1.PhaseSucceeded, true, false},
		{actionsv1alpha1.PhaseFailed, false, true},
		{actionsv1alpha1.PhaseExhausted, false, true},
		{actionsv1alpha1.PhaseConflict, false, true},
		{actionsv1alpha1.PhaseOutcomeUnknown, false, false},
	} {
		xa := action("charge", t0, phase(tc.phase))
		if tc.claimed {
			claimed(xa)
		}
		if got := Releasable(xa); got != tc.want {
			t.Errorf("Releasable(%s, claimed %v) = %v, want %v", tc.phase, tc.claimed, got, tc.want)
		}
	}
}

// ReleaseAfterWrite releases only a releasable holder; an OutcomeUnknown one keeps its subject.
func TestReleaseAfterWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		xa   *actionsv1alpha1.ExternalAction
		kept bool
	}{
		{"Succeeded", action("charge", t0, phase(actionsv1alpha1.PhaseSucceeded)), false},
		{"Exhausted", action("charge", t0, phase(actionsv1alpha1.PhaseExhausted)), false},
		{"OutcomeUnknown", action("charge", t0, phase(actionsv1alpha1.PhaseOutcomeUnknown)), true},
		{"Succeeded with the claim still open", action("charge", t0, phase(actionsv1alpha1.PhaseSucceeded), claimed), true},
		{"InProgress", action("charge", t0, phase(actionsv1alpha1.PhaseInProgress)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := fakeLock(t, []client.Object{lease(id("charge"))}, interceptor.Funcs{})
			l.ReleaseAfterWrite(tc.xa)
			if kept := getLease(t, c) != nil; kept != tc.kept {
				t.Errorf("Lease kept = %v, want %v", kept, tc.kept)
			}
		})
	}
}

// ActionsOnSameSubject wakes the other unfinished actions on the subject in the namespace, and nobody for an
// action without a subject or another kind of object.
func TestActionsOnSameSubject(t *testing.T) {
	charge := action("charge", t0, phase(actionsv1alpha1.PhaseSucceeded))
	objs := []client.Object{
		charge,
		action("refund", t0.Add(time.Minute)),
		action("refund-2", t0.Add(2*time.Minute), phase(actionsv1alpha1.PhaseInProgress), claimed),
		action("old-refund", t0.Add(-time.Minute), phase(actionsv1alpha1.PhaseFailed)),
		action("unknown", t0.Add(-time.Minute), phase(actionsv1alpha1.PhaseOutcomeUnknown)),
		action("elsewhere", t0, inNamespace("bank")),
		action("other-order", t0, onSubject("order/20")),
		action("no-subject", t0, onSubject("")),
	}
	l, _ := fakeLock(t, objs, interceptor.Funcs{})
	ctx := context.Background()
	var got []string
	for _, r := range l.ActionsOnSameSubject(ctx, charge) {
		got = append(got, r.String())
	}
	if want := []string{"shop/refund", "shop/refund-2"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("requests = %v, want %v", got, want)
	}
	if r := l.ActionsOnSameSubject(ctx, action("no-subject", t0, onSubject(""))); r != nil {
		t.Errorf("an action without a subject wakes %v", r)
	}
	if r := l.ActionsOnSameSubject(ctx, lease(id("charge"))); r != nil {
		t.Errorf("a Lease wakes %v", r)
	}
}

// Changed passes what can end a wait: a move into or out of a terminal phase and a deletion, of an action
// with a subject.
func TestChanged(t *testing.T) {
	pending, inProgress := phase(actionsv1alpha1.PhasePending), phase(actionsv1alpha1.PhaseInProgress)
	succeeded, unknown := phase(actionsv1alpha1.PhaseSucceeded), phase(actionsv1alpha1.PhaseOutcomeUnknown)
	update := func(old, cur func(*actionsv1alpha1.ExternalAction), more ...func(*actionsv1alpha1.ExternalAction)) bool {
		return Changed.Update(event.UpdateEvent{ObjectOld: action("charge", t0, old), ObjectNew: action("charge", t0, append([]func(*actionsv1alpha1.ExternalAction){cur}, more...)...)})
	}
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"InProgress to Succeeded", update(inProgress, succeeded), true},
		{"InProgress to OutcomeUnknown", update(inProgress, unknown), true},
		{"OutcomeUnknown to Succeeded (resolved)", update(unknown, succeeded), true},
		{"OutcomeUnknown to Pending (retry)", update(unknown, pending), true},
		{"Pending to InProgress", update(pending, inProgress), false},
		{"no phase change", update(inProgress, inProgress), false},
		{"a terminal action stays terminal", update(succeeded, succeeded), false},
		{"deletion begins", update(inProgress, inProgress, deleting), true},
		{"finished, without a subject", update(inProgress, succeeded, onSubject("")), false},
		{"another kind of object", Changed.Update(event.UpdateEvent{ObjectOld: lease("a"), ObjectNew: lease("b")}), false},
		{"deleted", Changed.Delete(event.DeleteEvent{Object: action("charge", t0)}), true},
		{"deleted, without a subject", Changed.Delete(event.DeleteEvent{Object: action("charge", t0, onSubject(""))}), false},
		{"created", Changed.Create(event.CreateEvent{Object: action("charge", t0)}), false},
		{"generic", Changed.Generic(event.GenericEvent{Object: action("charge", t0)}), false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: Changed = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// recordingIndexer keeps the extractors Index registers, by field.
type recordingIndexer map[string]client.IndexerFunc

func (r recordingIndexer) IndexField(_ context.Context, _ client.Object, field string, fn client.IndexerFunc) error {
	r[field] = fn
	return nil
}

// Field indexes actions by their subject (none without one); WaitField by the reason of a wait for the
// subject (WaitingForSubject or SubjectOutcomeUnknown), only while the action is not terminal.
func TestIndex(t *testing.T) {
	idx := recordingIndexer{}
	if err := Index(context.Background(), idx); err != nil {
		t.Fatal(err)
	}
	waitingSubject := waitingFor(actionsv1alpha1.ReasonWaitingForSubject)
	for _, tc := range []struct {
		name  string
		field string
		obj   client.Object
		want  []string
	}{
		{"a subject", Field, action("charge", t0), []string{subj}},
		{"no subject", Field, action("charge", t0, onSubject("")), nil},
		{"not an action", Field, lease("x"), nil},
		{"waiting for the subject", WaitField, action("charge", t0, waitingSubject), []string{actionsv1alpha1.ReasonWaitingForSubject}},
		{"waiting behind an unknown outcome", WaitField, action("charge", t0, waitingFor(actionsv1alpha1.ReasonSubjectOutcomeUnknown)),
			[]string{actionsv1alpha1.ReasonSubjectOutcomeUnknown}},
		{"waiting for something else", WaitField, action("charge", t0, waitingFor("Scheduled")), nil},
		{"no Ready condition", WaitField, action("charge", t0), nil},
		{"a terminal action with a stale wait reason", WaitField, action("charge", t0, waitingSubject, phase(actionsv1alpha1.PhaseFailed)), nil},
		{"a wait reason without a subject", WaitField, action("charge", t0, waitingSubject, onSubject("")), nil},
		{"not an action", WaitField, lease("x"), nil},
	} {
		t.Run(tc.field+": "+tc.name, func(t *testing.T) {
			fn := idx[tc.field]
			if fn == nil {
				t.Fatalf("Index registered no %s", tc.field)
			}
			if got := fn(tc.obj); strings.Join(got, ",") != strings.Join(tc.want, ",") || (got == nil) != (tc.want == nil) {
				t.Errorf("index values = %q, want %q", got, tc.want)
			}
		})
	}
}

// UpdateGauges counts the waiters of both reasons and the longest wait behind an OutcomeUnknown holder, from
// its Stalled condition; the gauges are set anew on every call.
func TestUpdateGauges(t *testing.T) {
	now := t0.Add(time.Hour)
	stalled := func(since time.Time) func(*actionsv1alpha1.ExternalAction) {
		return condition(actionsv1alpha1.ConditionStalled, actionsv1alpha1.ReasonSubjectOutcomeUnknown, metav1.ConditionTrue, since)
	}
	blocked := waitingFor(actionsv1alpha1.ReasonSubjectOutcomeUnknown)
	for _, tc := range []struct {
		name                 string
		objs                 []client.Object
		wantWaiting, wantMax float64
	}{
		{name: "nobody waits"},
		{name: "waiters of both reasons in any namespace", objs: []client.Object{
			action("a", t0, waitingFor(actionsv1alpha1.ReasonWaitingForSubject)),
			action("b", t0, waitingFor(actionsv1alpha1.ReasonWaitingForSubject), inNamespace("bank")),
			action("c", t0, blocked, stalled(now.Add(-10*time.Minute))),
			action("d", t0, blocked, stalled(now.Add(-25*time.Minute))),
			action("e", t0, waitingFor("Scheduled")),
			action("f", t0, waitingFor(actionsv1alpha1.ReasonWaitingForSubject), phase(actionsv1alpha1.PhaseSucceeded)),
		}, wantWaiting: 4, wantMax: 1500},
		{name: "a blocked waiter without its Stalled condition counts, but not in the longest wait", objs: []client.Object{
			action("c", t0, blocked),
			action("d", t0, blocked, condition(actionsv1alpha1.ConditionStalled, actionsv1alpha1.ReasonSubjectOutcomeUnknown, metav1.ConditionFalse, t0)),
		}, wantWaiting: 2, wantMax: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			metrics.SubjectWaiting.Set(-1)
			metrics.SubjectBlockedByUnknown.Set(-1)
			_, c := fakeLock(t, tc.objs, interceptor.Funcs{})
			if err := UpdateGauges(context.Background(), c, now); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(metrics.SubjectWaiting); got != tc.wantWaiting {
				t.Errorf("actionledger_subject_waiting = %v, want %v", got, tc.wantWaiting)
			}
			if got := testutil.ToFloat64(metrics.SubjectBlockedByUnknown); got != tc.wantMax {
				t.Errorf("actionledger_subject_blocked_by_unknown_seconds = %v, want %v", got, tc.wantMax)
			}
		})
	}
}

// waitObservations is the count and sum of actionledger_subject_wait_seconds.
func waitObservations(t *testing.T) (uint64, float64) {
	t.Helper()
	m := &dto.Metric{}
	if err := metrics.SubjectWait.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// When an action takes its subject, actionledger_subject_wait_seconds observes how long it waited: since
// this manager first saw it wait, else (seen waiting by another manager) since its creation, or since its
// Reconciling condition changed once it had attempts; an action that never waited is not observed.
func TestHoldObservesWaitTime(t *testing.T) {
	charge := action("charge", t0)
	for _, tc := range []struct {
		name string
		xa   *actionsv1alpha1.ExternalAction
		// waitedAt, when set, is a Hold that waits behind charge before charge finishes.
		waitedAt time.Time
		forget   bool
		want     []float64 // observed seconds (none: not observed)
	}{
		{name: "waited here since its first wait", xa: action("refund", refundCreated), waitedAt: t0.Add(10 * time.Minute), want: []float64{600}},
		{name: "never waited", xa: action("refund", refundCreated)},
		{name: "forgotten (deleted) after it waited", xa: action("refund", refundCreated), waitedAt: t0.Add(10 * time.Minute), forget: true},
		{name: "seen waiting by another manager: since its creation", xa: action("refund", refundCreated,
			waitingFor(actionsv1alpha1.ReasonWaitingForSubject)), want: []float64{1140}},
		{name: "seen waiting after attempts: since Reconciling changed", xa: action("refund", refundCreated,
			waitingFor(actionsv1alpha1.ReasonSubjectOutcomeUnknown),
			condition(actionsv1alpha1.ConditionReconciling, actionsv1alpha1.ReasonSubjectOutcomeUnknown, metav1.ConditionFalse, t0.Add(15*time.Minute)),
			func(xa *actionsv1alpha1.ExternalAction) { xa.Status.Attempts = 1 }), want: []float64{300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := fakeLock(t, []client.Object{tc.xa, charge.DeepCopy()}, interceptor.Funcs{})
			ctx := context.Background()
			if !tc.waitedAt.IsZero() {
				if w, err := l.Hold(ctx, tc.xa, tc.waitedAt); err != nil || w == nil {
					t.Fatalf("Hold behind charge = %v, %v; want a wait", w, err)
				}
				if w, err := l.Hold(ctx, tc.xa, tc.waitedAt.Add(time.Minute)); err != nil || w == nil {
					t.Fatalf("Hold behind charge again = %v, %v; want a wait", w, err)
				}
			}
			if tc.forget {
				l.Forget(client.ObjectKeyFromObject(tc.xa))
			}
			done := &actionsv1alpha1.ExternalAction{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(charge), done); err != nil {
				t.Fatal(err)
			}
			done.Status.Phase = actionsv1alpha1.PhaseSucceeded
			if err := c.Update(ctx, done); err != nil {
				t.Fatal(err)
			}
			count, sum := waitObservations(t)
			if w, err := l.Hold(ctx, tc.xa, t0.Add(20*time.Minute)); err != nil || w != nil {
				t.Fatalf("Hold after charge finished = %v, %v", w, err)
			}
			if subjectWaitReason(tc.xa) == "" { // (a status still reading "waiting" is observed again)
				if w, err := l.Hold(ctx, tc.xa, t0.Add(30*time.Minute)); err != nil || w != nil { // a touch: no wait ended
					t.Fatalf("Hold again = %v, %v", w, err)
				}
			}
			gotCount, gotSum := waitObservations(t)
			wantSum := 0.0
			for _, s := range tc.want {
				wantSum += s
			}
			if gotCount-count != uint64(len(tc.want)) || gotSum-sum != wantSum {
				t.Errorf("observed %d waits of %vs in all, want %d of %vs", gotCount-count, gotSum-sum, len(tc.want), wantSum)
			}
		})
	}
}
