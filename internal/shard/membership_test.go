package shard

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const (
	ns    = "actionledger-system"
	dest  = "ClusterDestination/mail"
	other = "Destination/team-a/payments"
)

func newMember(c client.Client, clk *clocktesting.FakePassiveClock, id string) *Membership {
	return &Membership{Client: c, Reader: c, Namespace: ns, Name: MemberName(id), Holder: id,
		Interval: time.Second, LeaseDuration: 10 * time.Second, Clock: clk}
}

// tick runs one round of the loop (renew, then list) for each member.
func tick(t *testing.T, ms ...*Membership) {
	t.Helper()
	for _, m := range ms {
		if err := m.renew(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := m.list(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// A nil Membership (no sharding) gives every destination the whole limit.
func TestNilMembershipSharesNothing(t *testing.T) {
	var m *Membership
	if shares, _, ok := m.Share(dest, time.Now()); !ok || shares != 1 {
		t.Fatalf("nil membership: Share = %d, %v; want 1, true", shares, ok)
	}
}

// A shard waits until its view is fresh and the others had time to see it use the destination; then it counts
// the live shards that use the same destination, and a shard whose Lease stops changing stops counting after
// the lease duration.
func TestShareJoinsCountsAndExpires(t *testing.T) {
	s := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).Build()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b := newMember(c, clk, "a"), newMember(c, clk, "b")
	step := func() { clk.SetTime(clk.Now().Add(time.Second)); tick(t, a, b) }
	share := func(m *Membership, id string) (int, bool) {
		n, _, ok := m.Share(id, clk.Now())
		return n, ok
	}

	if _, ok := share(a, dest); ok {
		t.Fatal("before its first renewal a shard must wait")
	}
	tick(t, a, b) // a announces dest; b uses nothing yet
	if _, ok := share(a, dest); ok {
		t.Fatal("right after announcing, a must wait for the others to list")
	}
	for range 3 { // freshness = 3 intervals
		step()
	}
	if n, ok := share(a, dest); !ok || n != 1 {
		t.Fatalf("a alone on dest: Share = %d, %v; want 1, true", n, ok)
	}
	// b starts to use dest: it waits, while a already divides by 2 once it has listed b's announcement.
	if _, ok := share(b, dest); ok {
		t.Fatal("b must wait before its first use of dest")
	}
	step() // b announces after a listed
	step() // a lists b's announcement
	if n, ok := share(a, dest); !ok || n != 2 {
		t.Fatalf("a after b announced dest: Share = %d, %v; want 2, true", n, ok)
	}
	if n, ok := share(a, other); ok || n != 0 {
		t.Fatalf("a on a destination it never announced: Share = %d, %v; want a wait", n, ok)
	}
	if _, ok := share(b, dest); ok {
		t.Fatal("b must wait freshness (3 intervals) after its announcement")
	}
	for range 2 {
		step()
	}
	if n, ok := share(b, dest); !ok || n != 2 {
		t.Fatalf("b after joining: Share = %d, %v; want 2, true", n, ok)
	}

	// b stops: a counts it until its Lease has not changed for the lease duration (10s), then takes it all.
	for i := range 12 {
		clk.SetTime(clk.Now().Add(time.Second))
		tick(t, a)
		n, ok := share(a, dest)
		if !ok {
			t.Fatalf("a after %ds: must not wait", i+1)
		}
		if want := 2; i < 9 && n != want {
			t.Fatalf("a %ds after b's last renewal: %d shares, want %d (b may still send)", i+1, n, want)
		}
		if i == 11 && n != 1 {
			t.Fatalf("a 12s after b's last renewal: %d shares, want 1", n)
		}
	}
	if n, ok := share(a, other); !ok || n != 1 {
		t.Fatalf("a on a destination only it uses: Share = %d, %v; want 1, true", n, ok)
	}
	// b's Lease still exists: a later list must not count it as new.
	clk.SetTime(clk.Now().Add(time.Second))
	tick(t, a)
	if n, _ := share(a, dest); n != 1 {
		t.Fatalf("an expired Lease that still exists counted again: %d shares", n)
	}

	// a's own renewals stop for longer than freshness: it waits, and after renewing again it rejoins (waits).
	clk.SetTime(clk.Now().Add(4 * time.Second))
	if _, ok := share(a, dest); ok {
		t.Fatal("a with a stale view must wait")
	}
	tick(t, a)
	if _, ok := share(a, dest); ok {
		t.Fatal("a right after a gap in its renewals must wait (others may have counted it gone)")
	}
	var l coordinationv1.Lease
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: a.Name}, &l); err != nil {
		t.Fatal(err)
	}
	if l.Labels[LabelMember] != "true" || l.Annotations[AnnotationDestinations] == "" ||
		l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "a" || l.Spec.RenewTime == nil ||
		!l.Spec.RenewTime.Equal(&metav1.MicroTime{Time: clk.Now()}) {
		t.Fatalf("member Lease = %+v", l)
	}
}

// A member Lease that stays unchanged for ForgetAfter (a shard gone for good, e.g. a process without leader
// election that was restarted under a new identity) is deleted by the others; one still renewed is kept, and
// a shard whose Lease was deleted creates it again and joins anew (it waits, as after a start).
func TestStaleMemberLeasesAreForgotten(t *testing.T) {
	s := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).Build()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, b, gone := newMember(c, clk, "a"), newMember(c, clk, "b"), newMember(c, clk, "gone")
	for _, m := range []*Membership{a, b, gone} {
		m.ForgetAfter = 30 * time.Second
	}
	exists := func(m *Membership) bool {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: m.Name}, &coordinationv1.Lease{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	tick(t, a, b, gone)
	for range 29 { // gone stops renewing; a and b go on
		clk.SetTime(clk.Now().Add(time.Second))
		tick(t, a, b)
	}
	if !exists(gone) {
		t.Fatal("a member Lease was deleted before ForgetAfter")
	}
	for range 3 {
		clk.SetTime(clk.Now().Add(time.Second))
		tick(t, a, b)
	}
	if exists(gone) {
		t.Fatal("a member Lease unchanged for ForgetAfter was not deleted")
	}
	if !exists(a) || !exists(b) {
		t.Fatal("a renewed member Lease was deleted")
	}
	// The forgotten shard comes back: its Lease is created again and it waits before it admits.
	tick(t, gone)
	if !exists(gone) {
		t.Fatal("a forgotten shard's renewal did not create its Lease again")
	}
	if _, _, ok := gone.Share(dest, clk.Now()); ok {
		t.Fatal("a shard whose Lease was forgotten admitted at once; it must join anew")
	}
}
