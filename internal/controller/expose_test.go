//go:build !unit

package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	// platformToken is the credential a shared destination sends for the platform.
	platformToken = "platform-token-7f3a9c"
	// platformSession is the session the provider mints for it (a Set-Cookie and a body field).
	platformSession = "sess-41d8cd98f00b"
)

// sessionServer is a provider that authenticates the platform's token and answers every request with a
// session minted for it: Set-Cookie, a body echoing the token and naming the session, and an id.
func sessionServer(t *testing.T) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+platformToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Set-Cookie", "session="+platformSession+"; Path=/; HttpOnly")
		w.Header().Set("X-Request-Id", "req-7")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id":"ord-1","auth":%q,"session":%q}`, "Bearer "+platformToken, platformSession) // the echo of what it checked
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// sessionAction is an action on the destination (kind, name) that reads the session into its output Secret.
func sessionAction(ns, name, kind, dest string, values map[string]actionsv1alpha1.OutputExpression) *actionsv1alpha1.ExternalAction {
	xa := outputAction(ns, name, dest, name+"-out", false, values)
	xa.Spec.DestinationRef.Kind = kind
	return xa
}

// tokenSecret creates the Secret holding the platform's token in ns.
func tokenSecret(t *testing.T, ns string) {
	t.Helper()
	env.Create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "platform"},
		StringData: map[string]string{"token": platformToken}})
}

// bearer is the auth of a destination that sends the platform's token.
func bearer(s *actionsv1alpha1.DestinationSpec) {
	s.Auth = &actionsv1alpha1.AuthConfig{BearerToken: &actionsv1alpha1.SecretKeySelector{Name: "platform", Key: "token"}}
}

// sharedDestination creates a ClusterDestination at url that authenticates with the platform's token, with
// expose as its spec.response.expose (nil: the field absent, which needs the CRD's rule off).
func sharedDestination(t *testing.T, name, url string, expose *actionsv1alpha1.ResponseExposure) {
	t.Helper()
	cd := &actionsv1alpha1.ClusterDestination{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: actionsv1alpha1.ClusterDestinationSpec{DestinationSpec: actionsv1alpha1.DestinationSpec{URL: url}}}
	bearer(&cd.Spec.DestinationSpec)
	if expose != nil {
		cd.Spec.Response = &actionsv1alpha1.ClusterResponsePolicy{Expose: expose}
	}
	env.Create(t, cd)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cd) })
}

// Tenancy row 7: a ClusterDestination that authenticates with the platform's token, behind a provider that
// answers with a Set-Cookie session and a body naming it. With expose {} (what a new ClusterDestination gets)
// a tenant's outputs {session: response.headers["set-cookie"]} fails with a reason that names
// spec.response.expose and writes nothing, successWhen reading the body gets nothing of it, and status.response
// holds the status code alone. With expose listing X-Request-Id and /id the tenant reads those two. A
// namespaced Destination, the tenant's own, still sees the whole response.
func TestClusterDestinationExposesOnlyWhatItLists(t *testing.T) {
	ns, ctrlNS := env.Namespace(t), env.Namespace(t)
	url := sessionServer(t)
	tokenSecret(t, ctrlNS)
	tokenSecret(t, ns)
	closed, listed := "closed-"+ns, "listed-"+ns
	sharedDestination(t, closed, url, &actionsv1alpha1.ResponseExposure{})
	sharedDestination(t, listed, url, &actionsv1alpha1.ResponseExposure{Headers: []string{"x-request-id"}, Body: []string{"/id"}})
	env.CreateDestination(t, ns, "own", url, bearer)
	env.StartManager(t, app.Options{ControllerNamespace: ctrlNS})

	session := map[string]actionsv1alpha1.OutputExpression{"session": `response.headers["set-cookie"]`}
	env.Create(t, sessionAction(ns, "cookie", "ClusterDestination", closed, session))
	judged := sessionAction(ns, "judged", "ClusterDestination", closed, nil)
	judged.Spec.Outputs = nil
	judged.Spec.SuccessWhen = `response.statusCode == 201 && response.body.session.startsWith("sess-")`
	env.Create(t, judged)
	env.Create(t, sessionAction(ns, "listed", "ClusterDestination", listed, map[string]actionsv1alpha1.OutputExpression{
		"id": "response.body.id", "request": `response.headers["x-request-id"]`}))
	env.Create(t, sessionAction(ns, "listed-cookie", "ClusterDestination", listed, session))
	env.Create(t, sessionAction(ns, "own", "Destination", "own", session))

	// expose {}: the session is not the tenant's to read.
	xa := outputsReason(t, ns, "cookie", actionsv1alpha1.ReasonOutputExpressionFailed)
	msg := condition(xa, actionsv1alpha1.ConditionOutputsReady).Message
	if !strings.Contains(msg, "no such key") || !strings.Contains(msg, "spec.response.expose") {
		t.Errorf("OutputsReady message %q, want the missing key and spec.response.expose", msg)
	}
	if !secretAbsent(t, ns, "cookie-out") {
		t.Error("the output Secret was written")
	}
	if r := xa.Status.Response; r == nil || r.StatusCode != 201 || len(r.Headers) != 0 || r.Body != "" || r.BodySHA256 != "" {
		t.Errorf("status.response = %+v, want the status code alone", r)
	}
	noSecretIn(t, xa)

	xa = env.WaitPhase(t, ns, "judged", actionsv1alpha1.PhaseFailed, 30*time.Second)
	if !strings.Contains(xa.Status.LastError, "spec.successWhen") || !strings.Contains(xa.Status.LastError, "spec.response.expose") {
		t.Errorf("lastError %q, want successWhen's failure and spec.response.expose", xa.Status.LastError)
	}
	noSecretIn(t, xa)

	// expose {headers: [x-request-id], body: [/id]}: those two, and still no session.
	xa = outputsReason(t, ns, "listed", actionsv1alpha1.ReasonOutputsWritten)
	sec := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "listed-out"}, sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["id"]) != "ord-1" || string(sec.Data["request"]) != "req-7" {
		t.Errorf("Secret data %v, want id ord-1 and request req-7", sec.Data)
	}
	if r := xa.Status.Response; r == nil || r.StatusCode != 201 || r.Body != `{"id":"ord-1"}` || len(r.Headers) != 0 {
		t.Errorf("status.response = %+v, want the status code and body {\"id\":\"ord-1\"}", r)
	}
	noSecretIn(t, xa)
	outputsReason(t, ns, "listed-cookie", actionsv1alpha1.ReasonOutputExpressionFailed)
	if !secretAbsent(t, ns, "listed-cookie-out") {
		t.Error("the session reached an output through a ClusterDestination that exposes other headers")
	}

	// The tenant's own Destination: the whole response (its token still redacted).
	outputsReason(t, ns, "own", actionsv1alpha1.ReasonOutputsWritten)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "own-out"}, sec); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sec.Data["session"]), platformSession) {
		t.Errorf("a namespaced Destination's output session = %q, want the cookie", sec.Data["session"])
	}
	own := env.Get(t, ns, "own")
	if r := own.Status.Response; r == nil || !strings.Contains(r.Body, platformSession) || !strings.Contains(r.Body, "[REDACTED]") ||
		r.Headers["Content-Type"] != "application/json" || r.BodySHA256 == "" {
		t.Errorf("a namespaced Destination's status.response = %+v, want the whole response, token redacted", r)
	}
}

// noSecretIn fails when the session or the token appears anywhere in xa's status.
func noSecretIn(t *testing.T, xa *actionsv1alpha1.ExternalAction) {
	t.Helper()
	if s := envtestutil.JSON(xa.Status); strings.Contains(s, platformSession) || strings.Contains(s, platformToken) {
		t.Errorf("%s's status holds the session or the token: %s", xa.Name, s)
	}
	for _, e := range env.Events(t, xa.Namespace, xa.Name) {
		if strings.Contains(e, platformSession) || strings.Contains(e, platformToken) {
			t.Errorf("%s's Event holds the session or the token: %s", xa.Name, e)
		}
	}
}

// A ClusterDestination stored before spec.response.expose existed (written here while the CRD lacks the rule
// that asks for it) keeps today's behaviour: its tenants read the whole response, Set-Cookie included, until
// its admin sets expose. It reads back without expose (no CRD default fills it in).
func TestStoredClusterDestinationKeepsTheWholeResponse(t *testing.T) {
	ns, ctrlNS := env.Namespace(t), env.Namespace(t)
	url := sessionServer(t)
	tokenSecret(t, ctrlNS)
	name := "stored-" + ns
	withoutExposeRule(t, func() { sharedDestination(t, name, url, nil) })
	cd := &actionsv1alpha1.ClusterDestination{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, cd); err != nil {
		t.Fatal(err)
	}
	if cd.Spec.Response != nil {
		t.Fatalf("the stored ClusterDestination reads back with response %+v, want none", cd.Spec.Response)
	}
	env.StartManager(t, app.Options{ControllerNamespace: ctrlNS})

	env.Create(t, sessionAction(ns, "legacy", "ClusterDestination", name,
		map[string]actionsv1alpha1.OutputExpression{"session": `response.headers["set-cookie"]`}))
	xa := outputsReason(t, ns, "legacy", actionsv1alpha1.ReasonOutputsWritten)
	sec := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "legacy-out"}, sec); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sec.Data["session"]), platformSession) {
		t.Errorf("output session = %q, want the whole response's Set-Cookie", sec.Data["session"])
	}
	if r := xa.Status.Response; r == nil || !strings.Contains(r.Body, `"id":"ord-1"`) || r.BodySHA256 == "" {
		t.Errorf("status.response = %+v, want the whole body", r)
	}
}

// withoutExposeRule runs create while the ClusterDestination CRD lacks its spec.response.expose rule (found by
// its fieldPath), as a CRD from before the field, and puts the rule back after.
func withoutExposeRule(t *testing.T, create func()) {
	t.Helper()
	withoutCRDRule(t, "clusterdestinations.actions.actionledger.dev", []string{"spec"},
		func(r apiextensionsv1.ValidationRule) bool { return r.FieldPath == ".response" },
		func() bool { // the server takes a ClusterDestination without expose (dry run)
			cd := &actionsv1alpha1.ClusterDestination{ObjectMeta: metav1.ObjectMeta{Name: "probe"},
				Spec: actionsv1alpha1.ClusterDestinationSpec{DestinationSpec: actionsv1alpha1.DestinationSpec{URL: "https://api.example/x"}}}
			return env.Client.Create(context.Background(), cd, client.DryRunAll) == nil
		}, create)
}
