//go:build !unit

package controller_test

import (
	"context"
	"encoding/json"
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
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// outputAction is an action on dest whose outputs go to the Secret (or, with configMap, the ConfigMap) target.
func outputAction(ns, name, dest, target string, configMap bool, values map[string]actionsv1alpha1.OutputExpression) *actionsv1alpha1.ExternalAction {
	xa := envtestutil.Action(ns, name, dest, "/orders", `{"sku":"a"}`)
	xa.Spec.Outputs = &actionsv1alpha1.ActionOutputs{Values: values}
	if configMap {
		xa.Spec.Outputs.ConfigMapName = target
	} else {
		xa.Spec.Outputs.SecretName = target
	}
	return xa
}

func condition(xa *actionsv1alpha1.ExternalAction, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(xa.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// outputsReason waits until status.outputs records reason.
func outputsReason(t *testing.T, ns, name, reason string) *actionsv1alpha1.ExternalAction {
	t.Helper()
	return env.WaitFor(t, ns, name, 30*time.Second, "status.outputs.reason "+reason, func(xa *actionsv1alpha1.ExternalAction) bool {
		return xa.Status.Outputs != nil && xa.Status.Outputs.Reason == reason
	})
}

func secretAbsent(t *testing.T, ns, name string) bool {
	t.Helper()
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

// A success writes the Secret from the response (body field, header, status code), owned by the action
// (controller ownerReference, so garbage collection deletes it with the action); status.outputs names it and
// its keys, never a value; Ready is True only with OutputsReady True. Deleted later, it is not re-created:
// OutputMissing, Ready False, and nothing is sent again.
func TestOutputsWrittenOnSuccessAndNotRecreated(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, nil)
	env.StartManager(t, app.Options{})

	env.Create(t, outputAction(ns, "order-1", "shop", "order-1-out", false, map[string]actionsv1alpha1.OutputExpression{
		"orderID":  "response.body.id",
		"location": `response.headers["location"]`,
		"code":     "response.statusCode",
	}))
	xa := outputsReason(t, ns, "order-1", actionsv1alpha1.ReasonOutputsWritten)
	if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded {
		t.Fatalf("phase = %s", xa.Status.Phase)
	}
	if r, o := condition(xa, actionsv1alpha1.ConditionReady), condition(xa, actionsv1alpha1.ConditionOutputsReady); r.Status != metav1.ConditionTrue ||
		o.Status != metav1.ConditionTrue || o.Reason != actionsv1alpha1.ReasonOutputsWritten {
		t.Errorf("Ready = %+v, OutputsReady = %+v", r, o)
	}
	id := destination.EffectID(ns + "/order-1")
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-1-out"}, sec); err != nil {
		t.Fatal(err)
	}
	if got := map[string]string{"orderID": string(sec.Data["orderID"]), "location": string(sec.Data["location"]), "code": string(sec.Data["code"])}; got["orderID"] != id ||
		got["location"] != "/effects/"+id || got["code"] != "201" || len(sec.Data) != 3 {
		t.Errorf("Secret data = %v, want orderID %s, location /effects/%s, code 201", got, id, id)
	}
	ref := metav1.GetControllerOf(sec)
	if ref == nil || ref.UID != xa.UID || ref.Kind != "ExternalAction" || ref.Name != "order-1" {
		t.Errorf("ownerReferences = %+v, want the action as controller", sec.OwnerReferences)
	}
	if sec.Labels[actionsv1alpha1.LabelOutput] != "true" || sec.Annotations[actionsv1alpha1.AnnotationOutputOfUID] != string(xa.UID) {
		t.Errorf("labels %v, annotations %v", sec.Labels, sec.Annotations)
	}
	out := xa.Status.Outputs
	if out.Kind != "Secret" || out.Name != "order-1-out" || strings.Join(out.Keys, ",") != "code,location,orderID" || out.WrittenAt == nil {
		t.Errorf("status.outputs = %+v", out)
	}
	if b, _ := json.Marshal(out); strings.Contains(string(b), id) {
		t.Errorf("status.outputs carries a value: %s", b)
	}
	for _, c := range xa.Status.Conditions {
		if strings.Contains(c.Message, id) {
			t.Errorf("condition %s carries a value: %s", c.Type, c.Message)
		}
	}

	if err := env.Client.Delete(ctx, sec); err != nil {
		t.Fatal(err)
	}
	xa = outputsReason(t, ns, "order-1", actionsv1alpha1.ReasonOutputMissing)
	if r, s := condition(xa, actionsv1alpha1.ConditionReady), condition(xa, actionsv1alpha1.ConditionStalled); r.Status != metav1.ConditionFalse ||
		r.Reason != actionsv1alpha1.ReasonOutputMissing || s.Status != metav1.ConditionTrue || xa.Status.Phase != actionsv1alpha1.PhaseSucceeded {
		t.Errorf("after deletion: phase %s, Ready %+v, Stalled %+v", xa.Status.Phase, r, s)
	}
	env.WaitEvent(t, ns, "order-1", corev1.EventTypeWarning, actionsv1alpha1.ReasonOutputMissing, 10*time.Second)
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("the deleted output stays deleted and nothing is sent again"), func() bool {
		return secretAbsent(t, ns, "order-1-out") && srv.Requests(ns+"/order-1") == 1
	})
}

// outputs.retain: true writes the target without an ownerReference; a ConfigMap target works the same way.
func TestOutputsRetainedConfigMap(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, nil)
	env.StartManager(t, app.Options{})
	xa := outputAction(ns, "order-2", "shop", "order-2-out", true, map[string]actionsv1alpha1.OutputExpression{"orderID": "response.body.id"})
	xa.Spec.Outputs.Retain = true
	env.Create(t, xa)
	got := outputsReason(t, ns, "order-2", actionsv1alpha1.ReasonOutputsWritten)
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-2-out"}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["orderID"] != destination.EffectID(ns+"/order-2") || len(cm.OwnerReferences) != 0 {
		t.Errorf("ConfigMap data %v, ownerReferences %v; want the id and no owner", cm.Data, cm.OwnerReferences)
	}
	if got.Status.Outputs.Kind != "ConfigMap" {
		t.Errorf("status.outputs = %+v", got.Status.Outputs)
	}
}

// Outputs come only from the response that made the action Succeeded: a retried 503 with a body writes nothing,
// and a rejected (422) action writes nothing at all and has no OutputsReady condition.
func TestOutputsNeverFromFailedAttempts(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{InitialBackoff: durationp(100 * time.Millisecond)}
	})
	srv.Script(ns+"/flaky", destination.Step{Status: 503, Body: `{"id":"from-the-503"}`})
	srv.Script(ns+"/rejected", destination.Step{Status: 422, Body: `{"id":"from-the-422"}`})
	env.StartManager(t, app.Options{})
	values := map[string]actionsv1alpha1.OutputExpression{"orderID": "response.body.id"}
	env.Create(t, outputAction(ns, "flaky", "shop", "flaky-out", false, values))
	env.Create(t, outputAction(ns, "rejected", "shop", "rejected-out", false, values))

	outputsReason(t, ns, "flaky", actionsv1alpha1.ReasonOutputsWritten)
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "flaky-out"}, sec); err != nil {
		t.Fatal(err)
	}
	if got := string(sec.Data["orderID"]); got != destination.EffectID(ns+"/flaky") || srv.Requests(ns+"/flaky") != 2 {
		t.Errorf("orderID = %q after %d requests, want the 201's id", got, srv.Requests(ns+"/flaky"))
	}

	xa := env.WaitPhase(t, ns, "rejected", actionsv1alpha1.PhaseFailed, 20*time.Second)
	if xa.Status.Outputs != nil || meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionOutputsReady) != nil {
		t.Errorf("a Failed action has status.outputs %+v, conditions %+v", xa.Status.Outputs, xa.Status.Conditions)
	}
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("no Secret for the rejected action"), func() bool {
		return secretAbsent(t, ns, "rejected-out")
	})
}

// An expression that fails on the response (a field the 201 body does not have) leaves the action Succeeded,
// not Ready: OutputExpressionFailed, nothing written, nothing sent again. An expression that does not compile
// is an InvalidSpec before anything is sent.
func TestOutputsExpressionErrors(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, nil)
	env.StartManager(t, app.Options{})
	env.Create(t, outputAction(ns, "missing-field", "shop", "mf-out", false, map[string]actionsv1alpha1.OutputExpression{
		"id": "response.body.id", "invoice": "response.body.invoiceNumber"}))
	env.Create(t, outputAction(ns, "bad-cel", "shop", "bc-out", false, map[string]actionsv1alpha1.OutputExpression{"id": "response.body."}))

	xa := outputsReason(t, ns, "missing-field", actionsv1alpha1.ReasonOutputExpressionFailed)
	o := condition(xa, actionsv1alpha1.ConditionOutputsReady)
	if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || condition(xa, actionsv1alpha1.ConditionReady).Status != metav1.ConditionFalse ||
		!strings.Contains(o.Message, `spec.outputs.values["invoice"]`) || !strings.Contains(o.Message, "no such key") {
		t.Errorf("phase %s, OutputsReady %+v", xa.Status.Phase, o)
	}
	env.WaitEvent(t, ns, "missing-field", corev1.EventTypeWarning, actionsv1alpha1.ReasonOutputExpressionFailed, 10*time.Second)

	bad := env.WaitPhase(t, ns, "bad-cel", actionsv1alpha1.PhaseFailed, 20*time.Second)
	if s := condition(bad, actionsv1alpha1.ConditionStalled); s.Reason != actionsv1alpha1.ReasonInvalidSpec || !strings.Contains(s.Message, `spec.outputs.values["id"]`) {
		t.Errorf("Stalled = %+v", s)
	}
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("nothing written, one request, none for the invalid spec"), func() bool {
		return secretAbsent(t, ns, "mf-out") && srv.Requests(ns+"/missing-field") == 1 && srv.Requests(ns+"/bad-cel") == 0
	})
}

// An existing Secret that the action did not create is never changed. Found before the send, it holds the send
// back (Stalled, reason OutputConflict, nothing sent) until it is gone; appearing during the send, it ends the
// outputs with OutputConflict and a Warning Event, and the action stays Succeeded.
func TestOutputsConflict(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, nil)
	srv.Script(ns+"/during", destination.Step{Status: 201, Body: `{"id":"x"}`, Delay: 3 * time.Second, Apply: true})
	theirs := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"theirs": []byte("keep")}}
	}
	env.Create(t, theirs("before-out"))
	env.StartManager(t, app.Options{})
	values := map[string]actionsv1alpha1.OutputExpression{"id": "response.body.id"}
	env.Create(t, outputAction(ns, "before", "shop", "before-out", false, values))

	xa := env.WaitFor(t, ns, "before", 20*time.Second, "Stalled OutputConflict", func(xa *actionsv1alpha1.ExternalAction) bool {
		s := condition(xa, actionsv1alpha1.ConditionStalled)
		return s.Status == metav1.ConditionTrue && s.Reason == actionsv1alpha1.ReasonOutputConflict
	})
	if xa.Status.Phase.Terminal() || !strings.Contains(condition(xa, actionsv1alpha1.ConditionStalled).Message, "Delete or rename") {
		t.Errorf("phase %s, Stalled %+v", xa.Status.Phase, condition(xa, actionsv1alpha1.ConditionStalled))
	}
	env.WaitEvent(t, ns, "before", corev1.EventTypeWarning, actionsv1alpha1.ReasonOutputConflict, 10*time.Second)
	if n := srv.Requests(ns + "/before"); n != 0 {
		t.Fatalf("%d requests sent while the target conflicts, want 0", n)
	}
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "before-out"}, sec); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, sec); err != nil {
		t.Fatal(err)
	}
	outputsReason(t, ns, "before", actionsv1alpha1.ReasonOutputsWritten) // resumes by itself (recheck) once the object is gone

	env.Create(t, outputAction(ns, "during", "shop", "during-out", false, values))
	env.WaitFor(t, ns, "during", 20*time.Second, "attempt open", func(xa *actionsv1alpha1.ExternalAction) bool { return xa.Status.Claim != nil })
	env.Create(t, theirs("during-out"))
	xa = outputsReason(t, ns, "during", actionsv1alpha1.ReasonOutputConflict)
	if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || condition(xa, actionsv1alpha1.ConditionReady).Status != metav1.ConditionFalse ||
		condition(xa, actionsv1alpha1.ConditionStalled).Status != metav1.ConditionTrue {
		t.Errorf("phase %s, conditions %+v", xa.Status.Phase, xa.Status.Conditions)
	}
	env.WaitEvent(t, ns, "during", corev1.EventTypeWarning, actionsv1alpha1.ReasonOutputConflict, 10*time.Second)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "during-out"}, sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["theirs"]) != "keep" || len(sec.Data) != 1 || len(sec.OwnerReferences) != 0 {
		t.Errorf("the existing Secret was changed: %v, owners %v", sec.Data, sec.OwnerReferences)
	}
}

// A manager that stopped between recording Succeeded and writing the target held the values in memory only:
// the next manager records OutputLost and sends nothing; if the target this action wrote is already there (the
// stop came after the write), it records OutputsWritten.
func TestOutputsAfterRestart(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, nil)
	values := map[string]actionsv1alpha1.OutputExpression{"id": "response.body.id"}
	recorded := func(name string) *actionsv1alpha1.ExternalAction {
		xa := outputAction(ns, name, "shop", name+"-out", false, values)
		env.Create(t, xa)
		fp, err := fingerprint.Compute(&xa.Spec)
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		xa.Status = actionsv1alpha1.ExternalActionStatus{
			Phase: actionsv1alpha1.PhaseSucceeded, IdempotencyKey: ns + "/" + name, Fingerprint: fp, Attempts: 1,
			CompletedAt: &now, Response: &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"x"}`},
			Conditions: []metav1.Condition{
				{Type: actionsv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: actionsv1alpha1.ReasonOutputsPending, Message: "succeeded", LastTransitionTime: now},
				{Type: actionsv1alpha1.ConditionOutputsReady, Status: metav1.ConditionFalse, Reason: actionsv1alpha1.ReasonOutputsPending, Message: "writing", LastTransitionTime: now},
			},
		}
		if err := env.Client.Status().Update(ctx, xa); err != nil {
			t.Fatal(err)
		}
		return xa
	}
	recorded("lost")
	written := recorded("written")
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "written-out",
		Labels:      map[string]string{actionsv1alpha1.LabelOutput: "true"},
		Annotations: map[string]string{actionsv1alpha1.AnnotationOutputOf: "written", actionsv1alpha1.AnnotationOutputOfUID: string(written.UID)}},
		Data: map[string][]byte{"id": []byte("x")}})
	env.StartManager(t, app.Options{})

	xa := outputsReason(t, ns, "lost", actionsv1alpha1.ReasonOutputLost)
	if r := condition(xa, actionsv1alpha1.ConditionReady); r.Status != metav1.ConditionFalse || !strings.Contains(r.Message, "nothing is sent again") {
		t.Errorf("Ready = %+v", r)
	}
	xa = outputsReason(t, ns, "written", actionsv1alpha1.ReasonOutputsWritten)
	if condition(xa, actionsv1alpha1.ConditionReady).Status != metav1.ConditionTrue || strings.Join(xa.Status.Outputs.Keys, ",") != "id" {
		t.Errorf("Ready %+v, outputs %+v", condition(xa, actionsv1alpha1.ConditionReady), xa.Status.Outputs)
	}
	envtestutil.Consistently(t, time.Second, envtestutil.Say("nothing sent"), func() bool {
		return srv.Summary().Requests == 0 && secretAbsent(t, ns, "lost-out")
	})
}

// A re-created action replayed from a tombstone has no response to take outputs from: OutputsNotAvailable,
// Ready False, nothing sent. With outputs.retain, the earlier object's Secret outlives it and the replay uses
// it as it is (OutputsRetained, Ready True).
func TestOutputsOnTombstoneReplay(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, nil)
	env.StartManager(t, app.Options{})
	zero := int32(0)
	for _, retain := range []bool{false, true} {
		name := map[bool]string{false: "owned", true: "kept"}[retain]
		mk := func(ttl *int32) *actionsv1alpha1.ExternalAction {
			xa := outputAction(ns, name, "shop", name+"-out", false, map[string]actionsv1alpha1.OutputExpression{"id": "response.body.id"})
			xa.Spec.Outputs.Retain = retain
			xa.Spec.TTLSecondsAfterFinished = ttl // not in the fingerprint
			return xa
		}
		env.Create(t, mk(&zero)) // collected at once
		envtestutil.Eventually(t, 30*time.Second, envtestutil.Say(name+" to be written and collected"), func() bool {
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &actionsv1alpha1.ExternalAction{})
			return apierrors.IsNotFound(err) && !secretAbsent(t, ns, name+"-out")
		})
		env.Create(t, mk(nil))
		want := map[bool]string{false: actionsv1alpha1.ReasonOutputsNotAvailable, true: actionsv1alpha1.ReasonOutputsRetained}[retain]
		xa := env.WaitFor(t, ns, name, 30*time.Second, "replayed with outputs "+want, func(xa *actionsv1alpha1.ExternalAction) bool {
			return xa.Status.ReplayedFrom != nil && condition(xa, actionsv1alpha1.ConditionOutputsReady).Reason == want
		})
		ready := condition(xa, actionsv1alpha1.ConditionReady)
		if (ready.Status == metav1.ConditionTrue) != retain || xa.Status.Phase != actionsv1alpha1.PhaseSucceeded {
			t.Errorf("%s: phase %s, Ready %+v", name, xa.Status.Phase, ready)
		}
		if !retain && !strings.Contains(condition(xa, actionsv1alpha1.ConditionOutputsReady).Message, "replayed from the tombstone") {
			t.Errorf("%s: OutputsReady %+v", name, condition(xa, actionsv1alpha1.ConditionOutputsReady))
		}
		if n := srv.Requests(ns + "/" + name); n != 1 {
			t.Errorf("%s: %d requests, want 1 (a replay sends nothing)", name, n)
		}
		// Without a GC controller in envtest, the owned Secret of the earlier object remains; it is never adopted.
		if !retain {
			sec := &corev1.Secret{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-out"}, sec); err != nil {
				t.Fatal(err)
			}
			if ref := metav1.GetControllerOf(sec); ref == nil || ref.UID == xa.UID {
				t.Errorf("the owned Secret of the earlier object: owner %+v", ref)
			}
		}
	}
}

// The expressions see the response with the destination's Secret values redacted, as status does: a
// destination that echoes its credential cannot make an output carry it. They see the whole body, beyond the
// 4096 bytes status keeps.
func TestOutputsRedactedAndWholeBody(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	const token = "tok-9d2e6b1a0c47" //nolint:gosec // G101: a test credential
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cred"}, StringData: map[string]string{"token": token}})
	env.CreateDestination(t, ns, "shop", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "cred", Key: "token"}}
	})
	srv.Script(ns+"/echo", destination.Step{Status: 201, Apply: true,
		Body: `{"padding":"` + strings.Repeat("p", 8000) + `","echo":"Bearer ` + token + `","id":"ord_7"}`})
	env.StartManager(t, app.Options{})
	env.Create(t, outputAction(ns, "echo", "shop", "echo-out", false, map[string]actionsv1alpha1.OutputExpression{
		"echo": "response.body.echo", "id": "response.body.id"}))
	xa := outputsReason(t, ns, "echo", actionsv1alpha1.ReasonOutputsWritten)
	if !xa.Status.Response.BodyTruncated {
		t.Fatalf("status.response is not truncated: the test does not show the whole body is read")
	}
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "echo-out"}, sec); err != nil {
		t.Fatal(err)
	}
	if got := string(sec.Data["echo"]); strings.Contains(got, token) || !strings.Contains(got, "[REDACTED]") || string(sec.Data["id"]) != "ord_7" {
		t.Errorf("outputs = echo %q, id %q; want the token redacted and the id from past byte 4096", got, sec.Data["id"])
	}
}

// A person's decision "applied" on an OutcomeUnknown action makes it Succeeded without a response: the outputs
// are not available (OutputsNotAvailable, Ready False), and nothing is sent.
func TestOutputsAfterDecisionApplied(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "slow", url, func(s *actionsv1alpha1.DestinationSpec) { s.Timeout = durationp(time.Second) })
	srv.Script(ns+"/unsure", destination.Step{Status: 201, Body: `{"id":"late"}`, Delay: 3 * time.Second, Apply: true})
	env.StartManager(t, app.Options{})
	env.Create(t, outputAction(ns, "unsure", "slow", "unsure-out", false, map[string]actionsv1alpha1.OutputExpression{"id": "response.body.id"}))
	env.WaitPhase(t, ns, "unsure", actionsv1alpha1.PhaseOutcomeUnknown, 15*time.Second)
	env.Annotate(t, ns, "unsure", map[string]string{actionsv1alpha1.AnnotationResolve: actionsv1alpha1.DecisionApplied})
	xa := outputsReason(t, ns, "unsure", actionsv1alpha1.ReasonOutputsNotAvailable)
	if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || condition(xa, actionsv1alpha1.ConditionReady).Status != metav1.ConditionFalse ||
		!strings.Contains(condition(xa, actionsv1alpha1.ConditionOutputsReady).Message, "a person decided") {
		t.Errorf("phase %s, conditions %+v", xa.Status.Phase, xa.Status.Conditions)
	}
	envtestutil.Consistently(t, time.Second, envtestutil.Say("no Secret, one request"), func() bool {
		return secretAbsent(t, ns, "unsure-out") && srv.Requests(ns+"/unsure") == 1
	})
}

// bomb is the expression of the tenancy issue's first row (shared/cases C15): seventeen map steps that each
// double a string, 4 KB doubled to 512 MiB, over a list of one element.
func bomb(seed string, steps int) string {
	return "[" + seed + "]" + strings.Repeat(".map(x, x + x)", steps) + "[0].size() > 0"
}

// An expression whose cost over the declared response sizes exceeds the budget (the expression bomb of one
// tenant that would otherwise OOM the manager every tenant shares) is refused before anything is sent: the
// action ends Failed, Stalled InvalidSpec naming the field and "too expensive", zero requests, and the manager
// goes on serving another action.
func TestExpressionBombRefusedBeforeSend(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "shop", url, nil)
	env.StartManager(t, app.Options{})

	when := envtestutil.Action(ns, "bomb-when", "shop", "/orders", `{"sku":"a"}`)
	when.Spec.SuccessWhen = bomb("response.body.s", 17)
	env.Create(t, when)
	env.Create(t, outputAction(ns, "bomb-out", "shop", "bo-out", false, map[string]actionsv1alpha1.OutputExpression{
		"v": actionsv1alpha1.OutputExpression(strings.TrimSuffix(bomb("response.body.s", 9), ".size() > 0"))}))
	env.Create(t, envtestutil.Action(ns, "ordinary", "shop", "/orders", `{"sku":"b"}`))

	for name, field := range map[string]string{"bomb-when": "spec.successWhen", "bomb-out": `spec.outputs.values["v"]`} {
		xa := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseFailed, 20*time.Second)
		s := condition(xa, actionsv1alpha1.ConditionStalled)
		if s.Reason != actionsv1alpha1.ReasonInvalidSpec || !strings.Contains(s.Message, field) || !strings.Contains(s.Message, "too expensive") {
			t.Errorf("%s: Stalled = %+v, want InvalidSpec naming %s and 'too expensive'", name, s, field)
		}
	}
	env.WaitPhase(t, ns, "ordinary", actionsv1alpha1.PhaseSucceeded, 20*time.Second)
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("no request for either bomb"), func() bool {
		return srv.Requests(ns+"/bomb-when") == 0 && srv.Requests(ns+"/bomb-out") == 0
	})
}
