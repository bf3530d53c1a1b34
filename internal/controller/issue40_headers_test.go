//go:build !unit

package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// Issue 40 row 7: a ClusterDestination with a base path (/tenant-a) that sends the platform's token, and an
// action that sets X-Original-URL, X-Rewrite-URL, X-Forwarded-Prefix and X-HTTP-Method-Override, by which a
// backend would route out of the base path with the platform's credentials. The API server refuses such an
// action, saying why; one stored before the rule (written here while the CRD lacks it) ends Failed with reason
// InvalidSpec naming the headers, and nothing is sent. An action with ordinary headers is sent.
func TestRoutingOverrideHeadersAreNeverSent(t *testing.T) {
	ns, ctrlNS := env.Namespace(t), env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{})
	tokenSecret(t, ctrlNS)
	name := "routing-" + ns
	sharedDestination(t, name, url+"/tenant-a", &actionsv1alpha1.ResponseExposure{})
	routed := map[string]actionsv1alpha1.HeaderValue{
		"X-Original-URL": "/admin/users", "X-Rewrite-URL": "/admin/users", "X-Forwarded-Prefix": "/admin",
		"X-HTTP-Method-Override": "DELETE",
	}
	action := func(name string, headers map[string]actionsv1alpha1.HeaderValue) *actionsv1alpha1.ExternalAction {
		xa := envtestutil.Action(ns, name, "", "/charges", `{"amount":1}`)
		xa.Spec.DestinationRef = actionsv1alpha1.DestinationReference{Kind: "ClusterDestination", Name: "routing-" + ns}
		xa.Spec.Request.Headers = headers
		return xa
	}

	// Admission refuses it, saying why.
	err := env.Client.Create(context.Background(), action("routed-new", routed), client.DryRunAll)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "headers may not set routing-override or forwarding headers") {
		t.Fatalf("create = %v, want Invalid saying the routing-override headers are refused", err)
	}

	withoutRoutingHeaderRule(t, func() { env.Create(t, action("routed", routed)) })
	env.StartManager(t, app.Options{ControllerNamespace: ctrlNS})
	env.Create(t, action("plain", map[string]actionsv1alpha1.HeaderValue{"X-Request-Id": "r-1"}))

	xa := env.WaitPhase(t, ns, "routed", actionsv1alpha1.PhaseFailed, 30*time.Second)
	s := condition(xa, actionsv1alpha1.ConditionStalled)
	if s.Reason != actionsv1alpha1.ReasonInvalidSpec || !strings.Contains(s.Message,
		"X-Forwarded-Prefix, X-HTTP-Method-Override, X-Original-URL, X-Rewrite-URL") {
		t.Errorf("Stalled = %+v, want InvalidSpec naming the four headers", s)
	}
	env.WaitPhase(t, ns, "plain", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("a request with routing-override headers"), func() bool {
		return srv.Requests(ns+"/routed") == 0 && srv.Requests(ns+"/plain") == 1
	})
	if xa = env.Get(t, ns, "routed"); xa.Status.Attempts != 0 {
		t.Errorf("attempts = %d, want 0", xa.Status.Attempts)
	}
}

// withoutRoutingHeaderRule runs create while the ExternalAction CRD lacks its routing-override header rule on
// spec.request.headers, as a CRD from before the rule, and puts the rule back after.
func withoutRoutingHeaderRule(t *testing.T, create func()) {
	t.Helper()
	withoutCRDRule(t, "externalactions.actions.actionledger.dev", []string{"spec", "request", "headers"},
		func(r apiextensionsv1.ValidationRule) bool { return strings.Contains(r.Rule, "x-http-method-override") },
		func() bool {
			xa := envtestutil.Action("default", "probe", "d", "/", `{}`)
			xa.Spec.Request.Headers = map[string]actionsv1alpha1.HeaderValue{"X-Original-URL": "/x"}
			return env.Client.Create(context.Background(), xa, client.DryRunAll) == nil
		}, create)
}
