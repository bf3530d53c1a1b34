package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// After an unclaimed outcome is written, a cached copy older than that write is behind (no claim would stop a
// second send from it); the written version, a copy with the attempt recorded, or another object of the same
// name is not, and ends the memory.
func TestMailboxBehindAnUnclaimedWrite(t *testing.T) {
	obj := func(uid, rv string, attempts int32) *actionsv1alpha1.ExternalAction {
		return &actionsv1alpha1.ExternalAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", UID: types.UID(uid), ResourceVersion: rv},
			Status:     actionsv1alpha1.ExternalActionStatus{Attempts: attempts},
		}
	}
	b := newMailbox()
	if b.behind(obj("u1", "10", 0)) {
		t.Fatal("behind with nothing written")
	}
	for _, tc := range []struct {
		name string
		seen *actionsv1alpha1.ExternalAction
		want bool
	}{
		{"the cached copy before the write", obj("u1", "10", 0), true},
		{"the written version", obj("u1", "11", 1), false},
		{"a later copy with the attempt", obj("u1", "12", 1), false},
		{"another object of the same name", obj("u2", "20", 0), false},
	} {
		b.wrote(obj("u1", "11", 1))
		if got := b.behind(tc.seen); got != tc.want {
			t.Errorf("%s: behind = %v, want %v", tc.name, got, tc.want)
		}
		if !tc.want && b.behind(obj("u1", "10", 0)) {
			t.Errorf("%s: the memory is kept after the cache caught up", tc.name)
		}
	}
	b.wrote(obj("u1", "11", 1))
	b.forgetWritten(types.NamespacedName{Namespace: "shop", Name: "a"})
	if b.behind(obj("u1", "10", 0)) {
		t.Error("behind after forgetWritten")
	}
}
