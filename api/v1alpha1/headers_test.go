package v1alpha1_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Issue 40 row 7: the routing-override headers, in any case, and only they.
func TestRoutingHeader(t *testing.T) {
	for _, h := range []string{
		"X-Original-URL", "x-original-url", "X-Rewrite-URL", "X-Forwarded-Prefix", "X-Forwarded-Path", "X-Forwarded-Host",
		"X-Forwarded-Proto", "X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Uri", "X-HTTP-Method-Override", "X-HTTP-Method",
		"X-Method-Override", "X-Original-Method", "X-Original-URI", "X-Original-Host", "Forwarded", "FORWARDED", "X-Real-IP",
		"X-Host", "X-Envoy-Original-Path",
	} {
		if !actionsv1alpha1.RoutingHeader(h) {
			t.Errorf("%s is not refused", h)
		}
	}
	for _, h := range []string{
		"X-Request-Id", "X-Forwarded", "Forwarded-By", "X-Originator", "X-Http-Method-Overridden", "X-Hosted", "Host-Name",
		"Content-Type", "X-Url", "Original-URL", "Traceparent",
	} {
		if actionsv1alpha1.RoutingHeader(h) {
			t.Errorf("%s is refused, want accepted", h)
		}
	}
}

// The CEL rule on spec.request.headers lists exactly RoutingHeaders and RoutingHeaderPrefixes (a marker cannot
// name the Go list), so admission and the controller's check of stored actions refuse the same names.
func TestRoutingHeadersAgreeWithTheCRD(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "actions.actionledger.dev_externalactions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	headers := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["request"].Properties["headers"]
	var rule string
	for _, v := range headers.XValidations {
		if strings.Contains(v.Rule, "x-http-method-override") {
			rule = v.Rule
			if !strings.Contains(v.Message, "routing-override") {
				t.Errorf("message %q does not say why", v.Message)
			}
		}
	}
	if rule == "" {
		t.Fatal("no CEL rule on spec.request.headers refuses the routing-override headers")
	}
	in := regexp.MustCompile(`in \[([^\]]*)\]`).FindStringSubmatch(rule)
	if in == nil {
		t.Fatalf("rule %q has no list of names", rule)
	}
	var names []string
	for _, q := range regexp.MustCompile(`'([^']*)'`).FindAllStringSubmatch(in[1], -1) {
		names = append(names, q[1])
	}
	var prefixes []string
	for _, q := range regexp.MustCompile(`startsWith\('([^']*)'\)`).FindAllStringSubmatch(rule, -1) {
		prefixes = append(prefixes, q[1])
	}
	slices.Sort(names)
	slices.Sort(prefixes)
	wantNames, wantPrefixes := slices.Sorted(slices.Values(actionsv1alpha1.RoutingHeaders)),
		slices.Sorted(slices.Values(actionsv1alpha1.RoutingHeaderPrefixes))
	if !slices.Equal(names, wantNames) || !slices.Equal(prefixes, wantPrefixes) {
		t.Errorf("the CRD refuses names %q and prefixes %q; RoutingHeaders %q, RoutingHeaderPrefixes %q", names, prefixes,
			wantNames, wantPrefixes)
	}
}
