package uninstall

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/scheme"
)

func action(name string, st actionsv1alpha1.ExternalActionStatus) *actionsv1alpha1.ExternalAction {
	return &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID("uid-" + name),
			Finalizers: []string{actionsv1alpha1.Finalizer}},
		Spec:   actionsv1alpha1.ExternalActionSpec{DestinationRef: actionsv1alpha1.DestinationReference{Name: "pay"}},
		Status: st,
	}
}

// The manager is stopped first; a finished action gets its tombstone (with the destination's tombstoneTTL), then
// loses the finalizer; an action under which nothing was sent loses it without a tombstone; an action with an open
// attempt keeps it and is reported, and Run says so with ErrHeld; Restore starts the manager again.
func TestRunReleasesFinishedAndHoldsOpenAttempts(t *testing.T) {
	now := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	one := int32(1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "actionledger-system", Name: "actionledger-controller-manager"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"control-plane": "controller-manager"}}}}
	dest := &actionsv1alpha1.Destination{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pay"},
		Spec: actionsv1alpha1.DestinationSpec{Retention: &actionsv1alpha1.Retention{TombstoneTTL: &metav1.Duration{Duration: time.Hour}}}}
	done := action("done", actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseSucceeded, Fingerprint: "sha256:aa",
		IdempotencyKey: "team-a/done", Attempts: 1})
	fresh := action("fresh", actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhasePending})
	open := action("open", actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseInProgress, Fingerprint: "sha256:bb",
		IdempotencyKey: "team-a/open", Attempts: 1, Claim: &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "pod-a_1",
			StartedAt: metav1.NewTime(now), ExpiresAt: metav1.NewTime(now.Add(time.Minute))}})
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(dep, dest, done, fresh, open).
		WithStatusSubresource(&actionsv1alpha1.ExternalAction{}).Build()
	var out bytes.Buffer
	o := Options{Client: c, Manager: client.ObjectKeyFromObject(dep), StopTimeout: time.Second, Poll: time.Millisecond,
		Now: func() time.Time { return now }, Out: &out}
	rep, err := Run(context.Background(), o)
	if !errors.Is(err, ErrHeld) {
		t.Fatalf("Run: %v, want ErrHeld", err)
	}
	if rep.Released != 2 || rep.Tombstones != 1 || len(rep.Held) != 1 || rep.Held[0].Name != "open" || rep.ManagerReplicas != 1 {
		t.Errorf("report %+v: want 2 released, 1 tombstone, open held, 1 replica before", rep)
	}
	ctx := context.Background()
	got := &appsv1.Deployment{}
	_ = c.Get(ctx, client.ObjectKeyFromObject(dep), got)
	if *got.Spec.Replicas != 0 {
		t.Errorf("the manager has %d replicas, want 0", *got.Spec.Replicas)
	}
	for name, want := range map[string]int{"done": 0, "fresh": 0, "open": 1} {
		xa := &actionsv1alpha1.ExternalAction{}
		_ = c.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: name}, xa)
		if len(xa.Finalizers) != want {
			t.Errorf("%s has finalizers %v, want %d", name, xa.Finalizers, want)
		}
	}
	ts := &actionsv1alpha1.ActionTombstone{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "done"}, ts); err != nil {
		t.Fatalf("no tombstone for done: %v", err)
	}
	if ts.Spec.Fingerprint != "sha256:aa" || ts.Spec.Phase != actionsv1alpha1.PhaseSucceeded || !ts.Spec.ExpiresAt.Time.Equal(now.Add(time.Hour)) {
		t.Errorf("tombstone %+v: want the action's fingerprint and phase, expiring after the destination's tombstoneTTL", ts.Spec)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "team-a", Name: "fresh"}, &actionsv1alpha1.ActionTombstone{}); err == nil {
		t.Error("a tombstone for an action that sent nothing")
	}
	if s := out.String(); !strings.Contains(s, "held: ExternalAction team-a/open: attempt 1 is open") || !strings.Contains(s, "helm uninstall --no-hooks") {
		t.Errorf("report:\n%s\nwant the held action and what to do", s)
	}
	if err := Restore(ctx, o, rep.ManagerReplicas); err != nil {
		t.Fatal(err)
	}
	_ = c.Get(ctx, client.ObjectKeyFromObject(dep), got)
	if *got.Spec.Replicas != 1 {
		t.Errorf("after Restore the manager has %d replicas, want 1", *got.Spec.Replicas)
	}
}

// Without a held action Run succeeds; without a manager Deployment it does not wait for one.
func TestRunWithoutManager(t *testing.T) {
	done := action("done", actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseFailed, Fingerprint: "sha256:aa",
		IdempotencyKey: "team-a/done", Attempts: 2})
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(done).Build()
	rep, err := Run(context.Background(), Options{Client: c, Manager: types.NamespacedName{Namespace: "x", Name: "gone"}})
	if err != nil || rep.Released != 1 || rep.Tombstones != 1 {
		t.Errorf("Run = %+v, %v; want 1 released with its tombstone (default TTL: its destination is gone)", rep, err)
	}
}

// A pod counts as the manager's when its ReplicaSet is the manager Deployment's; a second Deployment's pod that the
// selector matches as well does not.
func TestOwnedBy(t *testing.T) {
	pod := func(rs, hash string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pod-template-hash": hash},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: rs}}}}
	}
	if !ownedBy(pod("actionledger-controller-manager-7b4fc7b7d", "7b4fc7b7d"), "actionledger-controller-manager") {
		t.Error("the manager's own pod is not counted")
	}
	if ownedBy(pod("actionledger-controller-manager-b-5d9c", "5d9c"), "actionledger-controller-manager") {
		t.Error("a pod of the Deployment actionledger-controller-manager-b is counted as the manager's")
	}
}
