package controller

import (
	"errors"
	"fmt"
	"testing"

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
			err := checkDestinationSpec(tc.spec, "Destination/ns/d", tc.namespaced, tc.allowed)
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if got := destinationReason(err, "none"); got != tc.wantReason {
				t.Fatalf("err = %v, reason %q, want %q", err, got, tc.wantReason)
			}
		})
	}
}

func TestDestinationReasonMapsWrappedErrors(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", errSecretNotAllowed):             actionsv1alpha1.ReasonSecretNotAllowed,
		fmt.Errorf("x: %w", errNamespaceNotAllowed):          actionsv1alpha1.ReasonNamespaceNotAllowed,
		fmt.Errorf("x: %w", errInsecureSkipVerifyNotAllowed): actionsv1alpha1.ReasonInsecureSkipVerifyNotAllowed,
		fmt.Errorf("x: %w", httpexec.ErrPathOutsideBase):     actionsv1alpha1.ReasonPathOutsideBase,
		errors.New("other"):                                  actionsv1alpha1.ReasonDestinationNotReady,
	} {
		if got := destinationReason(err, actionsv1alpha1.ReasonDestinationNotReady); got != want {
			t.Errorf("destinationReason(%v) = %q, want %q", err, got, want)
		}
	}
}
