package admission

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// admissionCase is one object sent to the API server as a dry-run create. want is a fragment of the refusal
// message; "" means the object must be accepted.
type admissionCase struct {
	name string
	obj  client.Object
	want string
}

// run dry-run creates every case's object: refusals must be Invalid and carry the fragment, the rest accepted.
func run(t *testing.T, cases []admissionCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := env.Client.Create(context.Background(), c.obj, client.DryRunAll)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused, want accepted: %v", err)
			case c.want == "":
			case err == nil:
				t.Fatalf("accepted, want refused with %q", c.want)
			case !apierrors.IsInvalid(err):
				t.Fatalf("err = %v, want Invalid with %q", err, c.want)
			case !strings.Contains(err.Error(), c.want):
				t.Fatalf("message %q does not contain %q", err.Error(), c.want)
			}
		})
	}
}

const (
	dotSegment  = "may not contain a '.' or '..' segment, literal or percent-encoded (%2e)"
	encodedSep  = "may not contain an encoded slash (%2F), a backslash or an encoded backslash (%5C) before the query"
	urlDots     = "url may not contain a '.' or '..' path segment"
	urlBackslsh = "url may not contain a backslash or an encoded backslash (%5C)"
	headerToken = "header names must be RFC 9110 tokens" //nolint:gosec // G101: an error message, not a credential
	headerHop   = "headers may not set hop-by-hop or framing headers"
	headerCreds = "headers may not set Authorization or Idempotency-Key" //nolint:gosec // G101: an error message, not a credential
	headerDup   = "header names are case-insensitive and each may appear once"
	headerEnc   = "headers may not set Accept-Encoding: every request asks for the identity coding"
	headerLong  = "header values are at most 8192 bytes"
	headerCtl   = "header values may not contain CR, LF, NUL or other control characters"
	hopName     = "may not be a hop-by-hop or framing header"
	tokenName   = "should match '^[-0-9A-Za-z!#$%&'*+.^_`|~]+$'"
	keyNS       = "keyFormat of a ClusterDestination must contain {namespace} and {name}"
)

func destination(ns string, mutate func(*actionsv1alpha1.DestinationSpec)) *actionsv1alpha1.Destination {
	d := &actionsv1alpha1.Destination{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d"},
		Spec:       actionsv1alpha1.DestinationSpec{URL: "https://api.example/tenant-a"},
	}
	if mutate != nil {
		mutate(&d.Spec)
	}
	return d
}

func clusterDestination(mutate func(*actionsv1alpha1.DestinationSpec)) *actionsv1alpha1.ClusterDestination {
	d := &actionsv1alpha1.ClusterDestination{
		ObjectMeta: metav1.ObjectMeta{Name: "cd"},
		Spec: actionsv1alpha1.ClusterDestinationSpec{
			DestinationSpec: actionsv1alpha1.DestinationSpec{URL: "https://api.example/tenant-a"},
			Response:        &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{}},
		},
	}
	if mutate != nil {
		mutate(&d.Spec.DestinationSpec)
	}
	return d
}

func action(ns string, mutate func(*actionsv1alpha1.ExternalActionSpec)) *actionsv1alpha1.ExternalAction {
	xa := envtestutil.Action(ns, "xa", "payments", "/charges", `{"amount":1}`)
	if mutate != nil {
		mutate(&xa.Spec)
	}
	return xa
}

// withField returns obj as unstructured with the field at path set to value, for values the typed structs
// cannot carry (an unparsable duration string).
func withField(t *testing.T, obj client.Object, value any, path ...string) client.Object {
	t.Helper()
	gvk, err := apiutil.GVKForObject(obj, app.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	if err := unstructured.SetNestedField(u.Object, value, path...); err != nil {
		t.Fatal(err)
	}
	return u
}

// Request and post-check paths stay under the destination's base URL: dot segments (also percent-encoded in
// any case mix) and encoded separators are refused before the query; the same characters elsewhere are not.
func TestPathsStayUnderBaseURL(t *testing.T) {
	ns := env.Namespace(t)
	paths := []struct{ path, want string }{
		{"/..", dotSegment},
		{"/../admin/x", dotSegment},
		{"/a/../b", dotSegment},
		{"/.", dotSegment},
		{"/./x", dotSegment},
		{"/a/.", dotSegment},
		{"/%2e%2e/admin", dotSegment},
		{"/%2E%2E/admin", dotSegment},
		{"/%2E%2e/admin", dotSegment},
		{"/.%2e/admin", dotSegment},
		{"/%2e./admin", dotSegment},
		{"/%2e", dotSegment},
		{"/x/..?q=1", dotSegment},
		{"/..#top", dotSegment},
		{"/a%2fb", encodedSep},
		{"/a%2F..", encodedSep},
		{"/%2e%2e%2fadmin", encodedSep},
		{`/a\b`, encodedSep},
		{`/..\admin`, encodedSep},
		{"/a%5cb", encodedSep},
		{"/a%5C", encodedSep},
		// Near misses: dots inside a name, more than two dots, dots and encodings in the query.
		{"/", ""},
		{"/a..b", ""},
		{"/v1/x.y", ""},
		{"/..a/b..", ""},
		{"/...", ""},
		{"/.well-known/openid-configuration", ""},
		{"/%2e%2e%2e", ""},
		{"/a%2eb", ""},
		{"/a%20b", ""},
		{"/x?q=..", ""},
		{"/x?next=/../admin&p=%2e%2e%2f&b=a%5cb", ""},
		{`/x?q=a\b`, ""},
	}
	var cases []admissionCase
	for _, p := range paths {
		want := p.want
		if want != "" {
			want = "request.path " + want
		}
		cases = append(cases, admissionCase{"request " + p.path, action(ns, func(s *actionsv1alpha1.ExternalActionSpec) {
			s.Request.Path = p.path
		}), want})
		want = p.want
		if want != "" {
			want = "reconciliation.path " + want
		}
		cases = append(cases, admissionCase{"reconciliation " + p.path, destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{
				Path: p.path, Applied: "response.statusCode == 200", NotApplied: "response.statusCode == 404",
			}
		}), want})
	}
	// A post-check path is a template that need not start with '/'.
	for _, p := range []struct{ path, want string }{
		{"..", dotSegment},
		{"../admin/{key}", dotSegment},
		{"%2e%2E/{key}", dotSegment},
		{"/items/{key}/..", dotSegment},
		{"/items/{key}", ""},
		{"{key}", ""},
		{"/items?key={key}&up=..", ""},
	} {
		want := p.want
		if want != "" {
			want = "reconciliation.path " + want
		}
		cases = append(cases, admissionCase{"reconciliation template " + p.path, destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{
				Path: p.path, Applied: "response.statusCode == 200", NotApplied: "response.statusCode == 404",
			}
		}), want})
	}
	run(t, cases)
}

// A destination's base URL is the boundary: its own path may not contain dot segments or backslashes.
func TestBaseURLHasNoDotSegments(t *testing.T) {
	ns := env.Namespace(t)
	urls := []struct{ url, want string }{
		{"https://api.example/tenant-a/..", urlDots},
		{"https://api.example/tenant-a/../admin", urlDots},
		{"https://api.example/..", urlDots},
		{"https://api.example/./x", urlDots},
		{"https://api.example/%2e%2e/admin", urlDots},
		{"http://api.example:8080/a/%2E/b", urlDots},
		{"https://api.example/a/..?q=1", urlDots},
		{`https://api.example\@evil.example/`, urlBackslsh},
		{`https://api.example/a\b`, urlBackslsh},
		{"https://api.example/a%5Cb", urlBackslsh},
		{"https://api.example", ""},
		{"https://api.example/", ""},
		{"https://api.example/tenant-a", ""},
		{"https://api.example/v1.2/x..y/...", ""},
		{"https://api.example/group%2Fproject", ""},
		{"https://api.example/x?q=..", ""},
		{"http://127.0.0.1:8443/a.b", ""},
	}
	var cases []admissionCase
	for _, u := range urls {
		cases = append(cases,
			admissionCase{"Destination " + u.url, destination(ns, func(s *actionsv1alpha1.DestinationSpec) { s.URL = u.url }), u.want},
			admissionCase{"ClusterDestination " + u.url, clusterDestination(func(s *actionsv1alpha1.DestinationSpec) { s.URL = u.url }), u.want})
	}
	run(t, cases)
}

// Every duration has a documented maximum (api/v1alpha1/limits.go): the bound itself is accepted, one second
// more is refused, as are negative values and strings that are not Go durations.
func TestDurationBounds(t *testing.T) {
	ns := env.Namespace(t)
	type field struct {
		name     string
		path     []string
		max      time.Duration
		positive bool // 0s is refused too
		objects  []client.Object
	}
	dest, xa := destination(ns, nil), action(ns, nil)
	fields := []field{
		{"timeout", []string{"spec", "timeout"}, actionsv1alpha1.MaxTimeout, true, []client.Object{dest}},
		{"initialBackoff", []string{"spec", "retryPolicy", "initialBackoff"}, actionsv1alpha1.MaxBackoff, false, []client.Object{dest, xa}},
		{"maxBackoff", []string{"spec", "retryPolicy", "maxBackoff"}, actionsv1alpha1.MaxBackoff, false, []client.Object{dest, xa}},
		{"deadline", []string{"spec", "retryPolicy", "deadline"}, actionsv1alpha1.MaxDeadline, true, []client.Object{dest, xa}},
		{"window", []string{"spec", "retryBudget", "window"}, actionsv1alpha1.MaxRetryBudgetWindow, true, []client.Object{dest}},
		{"ttlAfterFinished", []string{"spec", "retention", "ttlAfterFinished"}, actionsv1alpha1.MaxTTLAfterFinished, false, []client.Object{dest}},
		{"tombstoneTTL", []string{"spec", "retention", "tombstoneTTL"}, actionsv1alpha1.MaxTombstoneTTL, false, []client.Object{dest}},
	}
	var cases []admissionCase
	for _, f := range fields {
		refused := f.name + " must be a Go duration "
		values := []struct{ value, want string }{
			{f.max.String(), ""},
			{(f.max + time.Second).String(), refused},
			{"-1s", refused},
			{"1d", refused},
			{"soon", refused},
			{"99999999999999999999s", refused}, // overflows time.Duration
			{"1.5s", ""},
			{"1500ms", ""},
			{"1m30s", ""},
		}
		if f.positive {
			values = append(values, struct{ value, want string }{"0s", refused}, struct{ value, want string }{"0", refused})
		} else {
			values = append(values, struct{ value, want string }{"0s", ""})
		}
		for _, obj := range f.objects {
			kind := fmt.Sprintf("%T", obj)[len("*v1alpha1."):]
			for _, v := range values {
				cases = append(cases, admissionCase{kind + " " + f.name + "=" + v.value, withField(t, obj, v.value, f.path...), v.want})
			}
		}
	}
	maxTTL := int32(actionsv1alpha1.MaxTTLAfterFinished / time.Second)
	cases = append(cases,
		admissionCase{"ttlSecondsAfterFinished at max", action(ns, func(s *actionsv1alpha1.ExternalActionSpec) { s.TTLSecondsAfterFinished = &maxTTL }), ""},
		admissionCase{"ttlSecondsAfterFinished beyond max", action(ns, func(s *actionsv1alpha1.ExternalActionSpec) {
			s.TTLSecondsAfterFinished = new(maxTTL + 1)
		}), "less than or equal to 7776000"},
		// Go clients send metav1.Duration as time.Duration.String(): the server default and typical values pass.
		admissionCase{"typed durations", destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Timeout = &metav1.Duration{Duration: 1500 * time.Microsecond}
			s.RetryPolicy = &actionsv1alpha1.RetryPolicy{InitialBackoff: &metav1.Duration{Duration: 200 * time.Millisecond},
				MaxBackoff: &metav1.Duration{Duration: 5 * time.Minute}, Deadline: &metav1.Duration{Duration: time.Hour}}
			s.RetryBudget = &actionsv1alpha1.RetryBudget{Window: &metav1.Duration{Duration: 10 * time.Second}}
			s.Retention = &actionsv1alpha1.Retention{TTLAfterFinished: &metav1.Duration{Duration: 24 * time.Hour},
				TombstoneTTL: &metav1.Duration{Duration: 30 * 24 * time.Hour}}
		}), ""},
	)
	run(t, cases)
}

// ExternalAction headers: RFC 9110 token names, no credentials, no hop-by-hop or framing headers, one entry per
// case-insensitive name, values without control characters and at most 8 KiB, at most 32 entries.
func TestRequestHeaders(t *testing.T) {
	ns := env.Namespace(t)
	with := func(h map[string]string) client.Object {
		return action(ns, func(s *actionsv1alpha1.ExternalActionSpec) {
			s.Request.Headers = make(map[string]actionsv1alpha1.HeaderValue, len(h))
			for k, v := range h {
				s.Request.Headers[k] = actionsv1alpha1.HeaderValue(v)
			}
		})
	}
	many := map[string]string{}
	for i := range actionsv1alpha1.MaxRequestHeaders + 1 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	atMost := map[string]string{}
	for i := range actionsv1alpha1.MaxRequestHeaders {
		atMost[fmt.Sprintf("X-H%d", i)] = "v"
	}
	cases := []admissionCase{
		{"name with space", with(map[string]string{"X Bad": "v"}), headerToken},
		{"name with colon", with(map[string]string{"X-Bad:": "v"}), headerToken},
		{"name with CRLF", with(map[string]string{"X-A\r\nX-B": "v"}), headerToken},
		{"name with slash", with(map[string]string{"X/Y": "v"}), headerToken},
		{"empty name", with(map[string]string{"": "v"}), headerToken},
		{"name too long", with(map[string]string{strings.Repeat("x", actionsv1alpha1.MaxHeaderNameLength+1): "v"}), headerToken},
		{"Authorization", with(map[string]string{"authorization": "Bearer x"}), headerCreds},
		{"Idempotency-Key", with(map[string]string{"Idempotency-Key": "k"}), headerCreds},
		{"value with CRLF", with(map[string]string{"X-A": "v\r\nX-Injected: 1"}), headerCtl},
		{"value with LF", with(map[string]string{"X-A": "v\nw"}), headerCtl},
		{"value with CR", with(map[string]string{"X-A": "v\rw"}), headerCtl},
		{"value with NUL", with(map[string]string{"X-A": "v\x00w"}), headerCtl},
		{"value with DEL", with(map[string]string{"X-A": "v\x7f"}), headerCtl},
		{"value over 8 KiB", with(map[string]string{"X-A": strings.Repeat("a", actionsv1alpha1.MaxHeaderValueBytes+1)}), "may not be more than 8192 bytes"},
		// 4097 two-byte characters: under 8192 characters, over 8192 bytes.
		{"value over 8 KiB in bytes", with(map[string]string{"X-A": strings.Repeat("é", actionsv1alpha1.MaxHeaderValueBytes/2+1)}), headerLong},
		{"same name twice in different case", with(map[string]string{"X-Trace": "a", "x-trace": "b"}), headerDup},
		{"Accept-Encoding", with(map[string]string{"Accept-Encoding": "gzip"}), headerEnc},
		{"accept-encoding identity", with(map[string]string{"accept-encoding": "identity"}), headerEnc},
		{"ACCEPT-ENCODING", with(map[string]string{"ACCEPT-ENCODING": "br"}), headerEnc},
		{"too many headers", with(many), "must have at most 32 items"},
		// Near misses.
		{"X-Request-Id", with(map[string]string{"X-Request-Id": "0f8fad5b-d9cb-469f-a165-70867728950e"}), ""},
		{"token punctuation", with(map[string]string{"x-custom_header.v2!#$%&'*+^`|~": "v"}), ""},
		{"similar names", with(map[string]string{
			"TEA": "v", "Hostname": "v", "Connection-Id": "v", "X-Proxy-Token": "v", "Upgraded-From": "v",
			"Content-Type": "application/merge-patch+json", "Authorization-Hint": "v", "Expected": "v",
			"Accept": "application/json", "Accept-Language": "en", "X-Accept-Encoding": "v",
		}), ""},
		{"tab, spaces and UTF-8 in value", with(map[string]string{"X-A": "a\tb c é"}), ""},
		{"value at 8 KiB", with(map[string]string{"X-A": strings.Repeat("a", actionsv1alpha1.MaxHeaderValueBytes)}), ""},
		{"32 headers", with(atMost), ""},
		{"empty value", with(map[string]string{"X-A": ""}), ""},
	}
	for _, name := range []string{
		"Connection", "connection", "Transfer-Encoding", "UPGRADE", "TE", "te", "Expect", "Keep-Alive",
		"Content-Length", "Host", "Trailer", "Proxy-Authorization", "proxy-connection", "Proxy-Anything",
	} {
		cases = append(cases, admissionCase{"hop-by-hop " + name, with(map[string]string{name: "v"}), headerHop})
	}
	run(t, cases)
}

// Destination header names (auth headers, the idempotency header) are tokens and not hop-by-hop either.
func TestDestinationHeaderNames(t *testing.T) {
	ns := env.Namespace(t)
	auth := func(name string) client.Object {
		return destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Auth = &actionsv1alpha1.AuthConfig{Headers: []actionsv1alpha1.HeaderFromSecret{{
				Name: name, ValueFrom: actionsv1alpha1.SecretKeySelector{Name: "api", Key: "key"},
			}}}
		})
	}
	idem := func(header string) client.Object {
		return destination(ns, func(s *actionsv1alpha1.DestinationSpec) {
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Header: header}
		})
	}
	cases := []admissionCase{
		{"auth header with space", auth("X Api-Key"), tokenName},
		{"auth header with colon", auth("X-Api-Key:"), tokenName},
		{"auth Transfer-Encoding", auth("Transfer-Encoding"), "an auth header name " + hopName},
		{"auth Proxy-Authorization", auth("Proxy-Authorization"), "an auth header name " + hopName},
		{"auth host", auth("host"), "an auth header name " + hopName},
		{"auth Accept-Encoding", auth("accept-Encoding"), "an auth header name may not be Accept-Encoding"},
		{"auth X-Api-Key", auth("X-Api-Key"), ""},
		{"auth backtick token", auth("X-`Key`"), ""},
		{"idempotency header with space", idem("Idempotency Key"), tokenName},
		{"idempotency Connection", idem("Connection"), "idempotency.header " + hopName},
		{"idempotency Upgrade", idem("upgrade"), "idempotency.header " + hopName},
		{"idempotency X-Idempotency-Key", idem("X-Idempotency-Key"), ""},
	}
	run(t, cases)
}

// keyFormat returns a mutation that sets a deduplicating destination's key format.
func keyFormat(format string) func(*actionsv1alpha1.DestinationSpec) {
	return func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true, KeyFormat: format}
	}
}

// A ClusterDestination serves every namespace, so its keyFormat must contain {namespace} and {name}, the first
// of the two followed by a character that cannot occur in it; a namespaced Destination may drop {namespace}.
func TestClusterDestinationKeyFormatHasNamespace(t *testing.T) {
	ns := env.Namespace(t)
	cases := []admissionCase{
		{"cluster {name}", clusterDestination(keyFormat("{name}")), keyNS},
		{"cluster order-{name}", clusterDestination(keyFormat("order-{name}")), keyNS},
		{"cluster {Namespace}/{name}", clusterDestination(keyFormat("{Namespace}/{name}")), keyNS},
		{"cluster {namespace} alone", clusterDestination(keyFormat("{namespace}/")), keyNS},
		{"cluster {namespace}-{name}", clusterDestination(keyFormat("{namespace}-{name}")), keyNS},
		{"cluster {namespace}{name}", clusterDestination(keyFormat("{namespace}{name}")), keyNS},
		{"cluster {namespace}0{name}", clusterDestination(keyFormat("{namespace}0{name}")), keyNS},
		{"cluster {namespace} last", clusterDestination(keyFormat("{name}-x-{namespace}")), keyNS},
		{"cluster {name}.{namespace}", clusterDestination(keyFormat("{name}.{namespace}")), keyNS},
		{"cluster {name}{namespace}/", clusterDestination(keyFormat("{name}{namespace}/")), keyNS},
		{"cluster brace before {namespace}", clusterDestination(keyFormat("x{y}{namespace}/{name}")), keyNS},
		{"cluster {namespace}/{name}", clusterDestination(keyFormat("{namespace}/{name}")), ""},
		{"cluster {namespace}.{name}", clusterDestination(keyFormat("{namespace}.{name}")), ""},
		{"cluster {namespace}:{name}", clusterDestination(keyFormat("{namespace}:{name}")), ""},
		{"cluster prefix/{namespace}:{name}", clusterDestination(keyFormat("orders/{namespace}:{name}")), ""},
		{"cluster {name}@{namespace}", clusterDestination(keyFormat("{name}@{namespace}")), ""},
		{"cluster {name}/{namespace}", clusterDestination(keyFormat("{name}/{namespace}")), ""},
		{"cluster default keyFormat", clusterDestination(keyFormat("")), ""},
		{"cluster no idempotency", clusterDestination(nil), ""},
		{"namespaced {name}", destination(ns, keyFormat("{name}")), ""},
		{"namespaced {namespace}-{name}", destination(ns, keyFormat("{namespace}-{name}")), ""},
	}
	run(t, cases)
}

// Row 4 of issue 23: under keyFormat "{namespace}-{name}" the actions team/a-pay-1 and team-a/pay-1 send the
// same key, team-a-pay-1, so a deduplicating ClusterDestination would give one tenant the other's outcome.
// Admission refuses every format of the table under which two of these actions share a key, and every format
// it accepts gives them all distinct keys. Keys are rendered as the controller renders them: one pass of
// strings.Replacer over {namespace} and {name}, so a replaced value is never scanned again.
func TestClusterDestinationKeysOfTwoTenantsCannotCollide(t *testing.T) {
	actions := [][2]string{ // namespace, name: valid Kubernetes names that collide under some format
		{"team", "a-pay-1"}, {"team-a", "pay-1"}, // {namespace}-{name}
		{"team-b", "pay-1"},        // {name}
		{"team", "pay-1"},          // {namespace}
		{"t", "eam"}, {"te", "am"}, // {namespace}{name}
		{"c", "a-b"}, {"b-c", "a"}, // {name}-{namespace}
	}
	formats := []struct {
		format   string
		accepted bool
	}{
		{"{namespace}-{name}", false},
		{"{namespace}{name}", false},
		{"{name}-{namespace}", false},
		{"{name}", false},
		{"{namespace}/", false},
		{"", true}, // unset: the default, {namespace}/{name}
		{"{namespace}/{name}", true},
		{"{namespace}.{name}", true},
		{"{namespace}:{name}", true},
		{"{namespace}_{name}", true},
		{"pay:{namespace}:{name}:v1", true},
		{"{name}@{namespace}", true},
		{"{name}/{namespace}-{name}", true},
	}
	for _, f := range formats {
		t.Run(cmp.Or(f.format, "unset"), func(t *testing.T) {
			err := env.Client.Create(context.Background(), clusterDestination(keyFormat(f.format)), client.DryRunAll)
			if accepted := err == nil; accepted != f.accepted {
				t.Fatalf("admission accepted = %v (%v), want %v", accepted, err, f.accepted)
			}
			if err != nil && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), keyNS)) {
				t.Fatalf("err = %v, want Invalid with %q", err, keyNS)
			}
			format := cmp.Or(f.format, "{namespace}/{name}")
			seen := map[string]string{}
			var collided []string
			for _, a := range actions {
				key := strings.NewReplacer("{namespace}", a[0], "{name}", a[1]).Replace(format)
				if other, ok := seen[key]; ok {
					collided = append(collided, other+" and "+a[0]+"/"+a[1]+" both send "+key)
				}
				seen[key] = a[0] + "/" + a[1]
			}
			switch {
			case f.accepted && len(collided) > 0:
				t.Errorf("accepted, but %s", strings.Join(collided, "; "))
			case !f.accepted && len(collided) == 0:
				t.Errorf("refused, but none of the table's actions collide under it: add the pair that does")
			}
		})
	}
}

// Row 1 of issue 23: a Destination may name the ServiceAccount of its namespace whose rights read its Secrets;
// a ClusterDestination may not (it reads with the manager's rights, in the controller's namespace).
func TestServiceAccountName(t *testing.T) {
	ns := env.Namespace(t)
	withSA := func(name string) func(*actionsv1alpha1.DestinationSpec) {
		return func(s *actionsv1alpha1.DestinationSpec) { s.ServiceAccountName = name }
	}
	run(t, []admissionCase{
		{"Destination with a ServiceAccount", destination(ns, withSA("actionledger-sender")), ""},
		{"Destination with a ServiceAccount that is not a name", destination(ns, withSA("Sender_1")), "spec.serviceAccountName"},
		{"ClusterDestination with a ServiceAccount", clusterDestination(withSA("actionledger-sender")),
			"serviceAccountName is for namespaced Destinations"},
	})
}
