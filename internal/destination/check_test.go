package destination

import (
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/httpexec"
)

// checkDestinationSpec: insecureSkipVerify needs the flag on a namespaced Destination only; a base URL or a
// post-check path that leaves the base makes the destination unusable.
func TestCheckDestinationSpec(t *testing.T) {
	insecure := &actionsv1alpha1.DestinationSpec{URL: "https://api.example/a", TLS: &actionsv1alpha1.TLSConfig{InsecureSkipVerify: true}}
	for _, tc := range []struct {
		name                string
		spec                *actionsv1alpha1.DestinationSpec
		namespaced, allowed bool
		wantReason          string
	}{
		{name: "namespaced without the flag", spec: insecure, namespaced: true, wantReason: actionsv1alpha1.ReasonInsecureSkipVerifyNotAllowed},
		{name: "namespaced with the flag", spec: insecure, namespaced: true, allowed: true},
		{name: "cluster without the flag", spec: insecure},
		{name: "base with dot-dot", spec: &actionsv1alpha1.DestinationSpec{URL: "https://api.example/a/%2e%2e/b"}, namespaced: true,
			wantReason: actionsv1alpha1.ReasonPathOutsideBase},
		{name: "post-check path escapes", spec: &actionsv1alpha1.DestinationSpec{URL: "https://api.example/a",
			Reconciliation: &actionsv1alpha1.ReconciliationCheck{Path: "/../effects?key={key}"}}, wantReason: actionsv1alpha1.ReasonPathOutsideBase},
		{name: "post-check path with placeholders", spec: &actionsv1alpha1.DestinationSpec{URL: "https://api.example/a",
			Reconciliation: &actionsv1alpha1.ReconciliationCheck{Path: "/effects/{key}?ns={namespace}"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSpec(tc.spec, "Destination/ns/d", tc.namespaced, tc.allowed)
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if got := Reason(err, "none"); got != tc.wantReason {
				t.Fatalf("err = %v, reason %q, want %q", err, got, tc.wantReason)
			}
		})
	}
}

func TestDestinationReasonMapsWrappedErrors(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", errSecretNotAllowed):                                  actionsv1alpha1.ReasonSecretNotAllowed,
		fmt.Errorf("x: %w", errNamespaceNotAllowed):                               actionsv1alpha1.ReasonNamespaceNotAllowed,
		fmt.Errorf("x: %w", errInsecureSkipVerifyNotAllowed):                      actionsv1alpha1.ReasonInsecureSkipVerifyNotAllowed,
		fmt.Errorf("x: %w", httpexec.ErrPathOutsideBase):                          actionsv1alpha1.ReasonPathOutsideBase,
		errors.New("other"):                                                       actionsv1alpha1.ReasonDestinationNotReady,
		&destinationNotReady{id: "d", reason: actionsv1alpha1.ReasonEgressDenied}: actionsv1alpha1.ReasonEgressDenied,
		&destinationNotReady{id: "d", reason: "Invalid"}:                          actionsv1alpha1.ReasonDestinationNotReady,
	} {
		if got := Reason(err, actionsv1alpha1.ReasonDestinationNotReady); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
}

// Only the validator's EgressDenied verdict for the destination's current generation stalls an action; other
// verdicts (a Secret may come later) and stale ones are checked by the action itself.
func TestNotReadyTakesOnlyACurrentEgressVerdict(t *testing.T) {
	cond := func(reason string, gen int64) *metav1.Condition {
		return &metav1.Condition{Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, ObservedGeneration: gen}
	}
	for _, tc := range []struct {
		ready *metav1.Condition
		stall bool
	}{
		{nil, false},
		{cond(actionsv1alpha1.ReasonEgressDenied, 2), true},
		{cond(actionsv1alpha1.ReasonEgressDenied, 1), false},
		{cond("Invalid", 2), false},
		{&metav1.Condition{Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid", ObservedGeneration: 2}, false},
	} {
		rd := &Resolved{ID: "Destination/ns/d", ready: tc.ready, generation: 2}
		if err := rd.NotReady(); (err != nil) != tc.stall {
			t.Errorf("ready %+v: notReady = %v, want stall %v", tc.ready, err, tc.stall)
		}
	}
}
