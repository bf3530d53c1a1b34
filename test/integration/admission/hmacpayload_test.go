package admission

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// Row 7 of issue 23: with config/admission/hmac_payload_policy.yaml installed, a new signing.hmac without payload
// (on a Destination or a ClusterDestination) gets payload KeyTimestampBody, the key-and-time signature; an explicit
// Body stays Body. Without the policy the CRD refuses it (TestSigningAdmission), so none is silently body-only.
func TestNewHMACDefaultsToKeyTimestampBody(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	// The other tests of this package expect the CRD's refusal: once the policy is removed (the cleanups of
	// installFile, which run first), wait until it is no longer applied.
	t.Cleanup(func() {
		envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("the removed policy to stop defaulting payload"), func() bool {
			d := destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
				s.Signing = &actionsv1alpha1.SigningConfig{HMAC: &actionsv1alpha1.HMACSigning{Header: "X-Signature",
					SecretRef: actionsv1alpha1.SecretKeySelector{Name: "sig", Key: "secret"}}}
			})
			return env.Client.Create(ctx, d, client.DryRunAll) != nil
		})
	})
	installFile(t, "config/admission/hmac_payload_policy.yaml")
	hmacWith := func(p actionsv1alpha1.HMACPayload) func(*actionsv1alpha1.DestinationSpec) {
		return func(s *actionsv1alpha1.DestinationSpec) {
			s.Signing = &actionsv1alpha1.SigningConfig{HMAC: &actionsv1alpha1.HMACSigning{Header: "X-Signature", Payload: p,
				SecretRef: actionsv1alpha1.SecretKeySelector{Name: "sig", Key: "secret"}}}
		}
	}
	var d *actionsv1alpha1.Destination
	envtestutil.Eventually(t, 20*time.Second, envtestutil.Say("the policy to default signing.hmac.payload"), func() bool {
		d = destination(ns, hmacWith(""))
		return env.Client.Create(ctx, d, client.DryRunAll) == nil &&
			d.Spec.Signing.HMAC.Payload == actionsv1alpha1.HMACPayloadKeyTimestampBody
	})
	cd := clusterDestination(hmacWith(""))
	if err := env.Client.Create(ctx, cd, client.DryRunAll); err != nil || cd.Spec.Signing.HMAC.Payload != actionsv1alpha1.HMACPayloadKeyTimestampBody {
		t.Errorf("ClusterDestination: err %v, payload %q; want KeyTimestampBody", err, cd.Spec.Signing.HMAC.Payload)
	}
	body := destination(ns, hmacWith(actionsv1alpha1.HMACPayloadBody))
	if err := env.Client.Create(ctx, body, client.DryRunAll); err != nil || body.Spec.Signing.HMAC.Payload != actionsv1alpha1.HMACPayloadBody {
		t.Errorf("explicit Body: err %v, payload %q; want Body", err, body.Spec.Signing.HMAC.Payload)
	}
	// An update that adds signing.hmac gets the default too.
	plain := destination(ns, nil)
	plain.Name = "adds-hmac"
	env.Create(t, plain)
	hmacWith("")(&plain.Spec)
	if err := env.Client.Update(ctx, plain); err != nil || plain.Spec.Signing.HMAC.Payload != actionsv1alpha1.HMACPayloadKeyTimestampBody {
		t.Errorf("update adding hmac: err %v, payload %q; want KeyTimestampBody", err, plain.Spec.Signing.HMAC.Payload)
	}
}

// installFile creates the objects of a YAML file of the repository (path from its root) and deletes them when
// the test ends.
func installFile(t *testing.T, path string) {
	t.Helper()
	for _, u := range env.CreateFile(t, path) {
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u) })
	}
}
