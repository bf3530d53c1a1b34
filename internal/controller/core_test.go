//go:build !unit

package controller_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// One action: exactly one request carrying the idempotency key; Succeeded with the recorded response;
// re-applying the manifest and restarting the manager send nothing more.
func TestActionRunsOnceAndRecordsOutcome(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, nil)
	stop := env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "pay-42", "payments", "/charges", `{"currency":"EUR","amount":100}`))
	xa := env.WaitPhase(t, ns, "pay-42", actionsv1alpha1.PhaseSucceeded, 30*time.Second)

	key := ns + "/pay-42"
	if got := srv.Requests(key); got != 1 {
		t.Fatalf("destination received %d requests for %s, want 1", got, key)
	}
	log := srv.RequestLog(key)
	if h := log[0].Header.Get("Idempotency-Key"); h != key {
		t.Errorf("Idempotency-Key = %q, want %q", h, key)
	}
	if string(log[0].Body) != `{"amount":100,"currency":"EUR"}` {
		t.Errorf("body sent = %s, want RFC 8785 canonical JSON", log[0].Body)
	}
	if xa.Status.Response == nil || xa.Status.Response.StatusCode != 201 || !strings.Contains(xa.Status.Response.Body, `"id"`) ||
		!strings.HasPrefix(xa.Status.Response.BodySHA256, "sha256:") || xa.Status.Response.Headers["Location"] == "" {
		t.Errorf("recorded response = %+v", xa.Status.Response)
	}
	if xa.Status.Attempts != 1 || xa.Status.IdempotencyKey != key || !strings.HasPrefix(xa.Status.Fingerprint, "sha256:") ||
		xa.Status.CompletedAt == nil || xa.Status.ExpiresAt == nil || xa.Status.Claim != nil {
		t.Errorf("status = %+v", xa.Status)
	}
	ready := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != xa.Generation {
		t.Errorf("Ready condition = %+v", ready)
	}
	// The lean happy path: Ready alone; Reconciling and Stalled (abnormal-true) are removed, not set False.
	if len(xa.Status.Conditions) != 1 || meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionStalled) != nil ||
		meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling) != nil {
		t.Errorf("conditions = %+v", xa.Status.Conditions)
	}

	// Re-apply the same manifest (a GitOps sync touches labels): no new request.
	xa.Labels = map[string]string{"synced": "again"}
	if err := env.Client.Update(context.Background(), xa); err != nil {
		t.Fatal(err)
	}
	// A new manager process (new holder identity) finds the recorded outcome: no new request.
	stop()
	env.StartManager(t, app.Options{})
	// Touch again so the new manager certainly reconciles it after its cache synced.
	env.WaitFor(t, ns, "pay-42", 10*time.Second, "update", func(cur *actionsv1alpha1.ExternalAction) bool {
		cur.Annotations = map[string]string{"touched": time.Now().String()}
		return env.Client.Update(context.Background(), cur) == nil
	})
	time.Sleep(2 * time.Second) // give a buggy controller the chance to send again; the assertion is on the count
	if got := srv.Requests(key); got != 1 {
		t.Fatalf("after re-apply and restart the destination received %d requests, want 1", got)
	}
}

// A changed payload under the same key is refused by the API server with a message that says to use a new name.
func TestChangedPayloadRefusedAtAdmission(t *testing.T) {
	ns := env.Namespace(t)
	xa := envtestutil.Action(ns, "pay-43", "payments", "/charges", `{"amount":100}`)
	env.Create(t, xa)
	for name, mutate := range map[string]func(*actionsv1alpha1.ExternalAction){
		"body":        func(x *actionsv1alpha1.ExternalAction) { x.Spec.Request.Body.Raw = []byte(`{"amount":200}`) },
		"path":        func(x *actionsv1alpha1.ExternalAction) { x.Spec.Request.Path = "/refunds" },
		"destination": func(x *actionsv1alpha1.ExternalAction) { x.Spec.DestinationRef.Name = "other" },
		"successWhen": func(x *actionsv1alpha1.ExternalAction) { x.Spec.SuccessWhen = "response.statusCode == 201" },
	} {
		cur := &actionsv1alpha1.ExternalAction{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(xa), cur); err != nil {
			t.Fatal(err)
		}
		mutate(cur)
		err := env.Client.Update(context.Background(), cur)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s change: err = %v, want Invalid", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "create a new ExternalAction with a new name") || !strings.Contains(err.Error(), "immutable") {
			t.Errorf("%s change: message %q does not tell the user to use a new name", name, err.Error())
		}
	}
	// Fields outside the fingerprint stay editable.
	cur := &actionsv1alpha1.ExternalAction{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(xa), cur); err != nil {
		t.Fatal(err)
	}
	ttl := int32(60)
	cur.Spec.TTLSecondsAfterFinished = &ttl
	if err := env.Client.Update(context.Background(), cur); err != nil {
		t.Errorf("editing ttlSecondsAfterFinished: %v", err)
	}
}

// A 400 is a business rejection: Failed after one request, the 400 kept as the outcome.
func TestBusinessRejectionIsFailed(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	srv.Script("", destination.Step{Status: 400, Body: `{"code":"card_declined"}`})
	env.CreateDestination(t, ns, "payments", url, nil)
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "pay-400", "payments", "/charges", `{"amount":1}`))
	xa := env.WaitPhase(t, ns, "pay-400", actionsv1alpha1.PhaseFailed, 30*time.Second)
	if got := srv.Requests(ns + "/pay-400"); got != 1 {
		t.Fatalf("requests = %d, want 1", got)
	}
	if xa.Status.Response == nil || xa.Status.Response.StatusCode != 400 || !strings.Contains(xa.Status.Response.Body, "card_declined") {
		t.Errorf("response = %+v", xa.Status.Response)
	}
	if !meta.IsStatusConditionTrue(xa.Status.Conditions, actionsv1alpha1.ConditionStalled) {
		t.Errorf("Stalled not True: %+v", xa.Status.Conditions)
	}
}

// A Destination that names a Secret in another namespace is refused; the token never leaks.
func TestSecretInAnotherNamespaceRefused(t *testing.T) {
	ns := env.Namespace(t)
	other := env.Namespace(t)
	const token = "s3cr3t-token-value"
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "tok"}, StringData: map[string]string{"token": token}})
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "payments", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "tok", Namespace: other, Key: "token"}}
	})
	env.StartManager(t, app.Options{})
	env.Create(t, envtestutil.Action(ns, "pay-sec", "payments", "/charges", `{"amount":1}`))
	xa := env.WaitFor(t, ns, "pay-sec", 30*time.Second, "SecretNotAllowed condition", func(x *actionsv1alpha1.ExternalAction) bool {
		c := meta.FindStatusCondition(x.Status.Conditions, actionsv1alpha1.ConditionStalled)
		return c != nil && c.Reason == actionsv1alpha1.ReasonSecretNotAllowed
	})
	if srv.Summary().Requests != 0 {
		t.Fatalf("destination received %d requests", srv.Summary().Requests)
	}
	ready := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, "may read Secrets only in namespace") {
		t.Errorf("Ready = %+v", ready)
	}
	// The Destination itself reports the refusal (the destination validator).
	var c *metav1.Condition
	envtestutil.Eventually(t, 20*time.Second, func() string {
		return fmt.Sprintf("Destination Ready condition %+v to be False/SecretNotAllowed", c)
	}, func() bool {
		d := &actionsv1alpha1.Destination{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "payments"}, d); err != nil {
			t.Fatal(err)
		}
		c = meta.FindStatusCondition(d.Status.Conditions, actionsv1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == actionsv1alpha1.ReasonSecretNotAllowed
	})
	if strings.Contains(c.Message, token) {
		t.Fatalf("the Destination's condition leaks the token: %s", c.Message)
	}
	time.Sleep(500 * time.Millisecond) // let the Event land
	assertNoSecret(t, ns, "pay-sec", token)

	// The same Secret in the Destination's own namespace works, and the token still never leaks.
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tok"}, StringData: map[string]string{"token": token}})
	env.CreateDestination(t, ns, "payments-ok", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "tok", Key: "token"}}
	})
	env.Create(t, envtestutil.Action(ns, "pay-sec-ok", "payments-ok", "/charges", `{"amount":1}`))
	env.WaitPhase(t, ns, "pay-sec-ok", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got := srv.RequestLog(ns + "/pay-sec-ok")[0].Header.Get("Authorization"); got != "Bearer "+token {
		t.Errorf("Authorization header = %q", got)
	}
	assertNoSecret(t, ns, "pay-sec-ok", token)
}

func assertNoSecret(t *testing.T, ns, name, secret string) {
	t.Helper()
	xa := &actionsv1alpha1.ExternalAction{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, xa); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(secret))
	dump := strings.Join(env.Events(t, ns, name), "\n") + " " + envtestutil.JSON(xa.Status)
	if strings.Contains(dump, secret) || strings.Contains(dump, b64) {
		t.Fatalf("the secret value leaked into status or events: %s", dump)
	}
}
