package admission

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

const headerRouting = "headers may not set routing-override or forwarding headers"

// Issue 40 row 7: ExternalAction headers may not set the routing-override and forwarding headers by which a
// proxy or framework in front of a destination routes (out of a ClusterDestination's base path, with its
// credentials), in any case; names that merely resemble them are accepted.
func TestRoutingOverrideHeaders(t *testing.T) {
	ns := env.Namespace(t)
	with := func(name string) client.Object {
		return action(ns, func(s *actionsv1alpha1.ExternalActionSpec) {
			s.Request.Headers = map[string]actionsv1alpha1.HeaderValue{name: "/admin"}
		})
	}
	var cases []admissionCase
	for _, name := range []string{
		"X-Original-URL", "x-original-url", "X-Rewrite-URL", "X-Forwarded-Prefix", "X-Forwarded-Path", "X-Forwarded-Host",
		"X-Forwarded-Proto", "X-FORWARDED-FOR", "X-Forwarded-Uri", "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override",
		"X-Original-Method", "X-Original-URI", "Forwarded", "X-Real-IP", "X-Host", "X-Envoy-Original-Path",
	} {
		cases = append(cases, admissionCase{"refused " + name, with(name), headerRouting})
	}
	for _, name := range []string{"X-Forwarded", "Forwarded-By", "X-Originator", "X-Hosted", "X-Url", "Original-URL", "X-Request-Id"} {
		cases = append(cases, admissionCase{"near miss " + name, with(name), ""})
	}
	run(t, cases)
}
