package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/gateway"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

func dest(t *testing.T, ns string, o destination.Options, mutate func(*actionsv1alpha1.DestinationSpec)) *destination.Server {
	t.Helper()
	srv, url := envtestutil.DestinationServer(t, o)
	env.CreateDestination(t, ns, "shop", url, mutate)
	return srv
}

// The answer table of docs/gateway.md, request by request, against one destination.
func TestAnswerTable(t *testing.T) {
	ns := env.Namespace(t)
	srv := dest(t, ns, destination.Options{}, nil)
	tok := caller(t, ns, "checkout", "create", "get")
	base := "/v1/namespaces/" + ns + "/destinations/shop"

	t.Run("first request waits and answers the destination's response", func(t *testing.T) {
		a := do(t, req{path: base + "/charges?currency=eur", key: `"order-1"`, body: `{"amount":1}`, token: tok})
		if a.status != http.StatusCreated || a.header.Get(gateway.HeaderReplayed) != "" ||
			!strings.HasPrefix(a.header.Get("Location"), "/effects/") || !strings.Contains(a.body, `"id"`) {
			t.Fatalf("first answer %d %v %s: want the destination's 201 with its Location and body", a.status, a.header, a.body)
		}
		if a.header.Get(gateway.HeaderPhase) != "Succeeded" || a.header.Get(gateway.HeaderAction) != "/v1/namespaces/"+ns+"/actions/order-1" {
			t.Errorf("phase/action headers %v", a.header)
		}
		xa := env.Get(t, ns, "order-1")
		if xa.Annotations[gateway.AnnotationKey] != "order-1" || xa.Spec.Request.Path != "/charges?currency=eur" ||
			xa.Spec.Request.Method != "POST" || string(xa.Spec.Request.Body.Raw) != `{"amount":1}` {
			t.Errorf("created ExternalAction %s", envtestutil.JSON(xa))
		}
		if n := srv.Effects(ns + "/order-1"); n != 1 {
			t.Errorf("effects %d, want 1", n)
		}
	})
	t.Run("repeat replays the recorded response", func(t *testing.T) {
		a := do(t, req{gw: 1, path: base + "/charges?currency=eur", key: "order-1", body: `{ "amount": 1 }`, token: tok})
		if a.status != http.StatusCreated || a.header.Get(gateway.HeaderReplayed) != "true" || !strings.Contains(a.body, `"id"`) {
			t.Fatalf("repeat %d %v %s: want 201 with Idempotent-Replayed", a.status, a.header, a.body)
		}
		if n := srv.Requests(ns + "/order-1"); n != 1 {
			t.Errorf("destination requests %d, want 1", n)
		}
	})
	t.Run("same key with another body is 422", func(t *testing.T) {
		a := do(t, req{path: base + "/charges?currency=eur", key: "order-1", body: `{"amount":2}`, token: tok})
		if a.status != http.StatusUnprocessableEntity {
			t.Fatalf("changed body: %d %s, want 422", a.status, a.body)
		}
		if a.header.Get(gateway.HeaderAction) != "/v1/namespaces/"+ns+"/actions/order-1" || a.header.Get(gateway.HeaderPhase) != "Succeeded" {
			t.Errorf("422 headers %v", a.header)
		}
		if p := a.problem(t); p.Type != gateway.ProblemTypePrefix+"key-reused" || p.Reason != "FingerprintConflict" || p.Phase != "Succeeded" {
			t.Errorf("problem %+v", p)
		}
		a = do(t, req{method: http.MethodPut, path: base + "/charges?currency=eur", key: "order-1", body: `{"amount":1}`, token: tok})
		if a.status != http.StatusUnprocessableEntity {
			t.Errorf("changed method: %d %s, want 422", a.status, a.body)
		}
		if n := srv.Requests(ns + "/order-1"); n != 1 {
			t.Errorf("destination requests %d, want 1", n)
		}
	})
	t.Run("missing and invalid keys are 400 and create nothing", func(t *testing.T) {
		before := count(t, ns)
		for _, key := range []string{"", `"unterminated`, "two words", strings.Repeat("x", 256)} {
			a := do(t, req{path: base + "/charges", key: key, body: `{}`, token: tok})
			if a.status != http.StatusBadRequest {
				t.Errorf("key %q: %d %s, want 400", key, a.status, a.body)
				continue
			}
			want := "invalid-key"
			if key == "" {
				want = "missing-key"
			}
			if p := a.problem(t); p.Type != gateway.ProblemTypePrefix+want {
				t.Errorf("key %q: problem %+v, want %s", key, p, want)
			}
		}
		if n := count(t, ns); n != before {
			t.Errorf("%d ExternalActions, want %d", n, before)
		}
	})
	t.Run("a key that is not an object name is hashed and kept in an annotation", func(t *testing.T) {
		a := do(t, req{path: base + "/charges", key: `"Order 19 \"b\""`, body: `{"amount":19}`, token: tok})
		if a.status != http.StatusCreated {
			t.Fatalf("%d %s", a.status, a.body)
		}
		name := gateway.ObjectName(`Order 19 "b"`)
		if xa := env.Get(t, ns, name); !strings.HasPrefix(name, "k-") || xa.Annotations[gateway.AnnotationKey] != `Order 19 "b"` {
			t.Errorf("object %s annotations %v", name, xa.Annotations)
		}
	})
	t.Run("body over 64 KiB is 413, invalid JSON 400", func(t *testing.T) {
		big := `{"x":"` + strings.Repeat("a", gateway.MaxBodyBytes) + `"}`
		if a := do(t, req{path: base + "/charges", key: "big-1", body: big, token: tok}); a.status != http.StatusRequestEntityTooLarge {
			t.Errorf("big body: %d %s, want 413", a.status, a.body)
		}
		if a := do(t, req{path: base + "/charges", key: "bad-json", body: `{"x":`, token: tok}); a.status != http.StatusBadRequest {
			t.Errorf("bad JSON: %d %s, want 400", a.status, a.body)
		}
		for _, name := range []string{"big-1", "bad-json"} {
			if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name},
				&actionsv1alpha1.ExternalAction{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s: %v, want NotFound", name, err)
			}
		}
	})
	t.Run("what the CRD refuses is 400 with the API server's message", func(t *testing.T) {
		a := do(t, req{path: base + "/a%2Fb", key: "slash-1", body: `{}`, token: tok})
		if a.status != http.StatusBadRequest {
			t.Fatalf("%d %s, want 400", a.status, a.body)
		}
		if p := a.problem(t); p.Type != gateway.ProblemTypePrefix+"invalid-request" || !strings.Contains(p.Detail, "encoded slash") {
			t.Errorf("problem %+v, want the CRD's message about the encoded slash", p)
		}
	})
	t.Run("no token is 401", func(t *testing.T) {
		a := do(t, req{path: base + "/charges", key: "anon-1", body: `{}`})
		if a.status != http.StatusUnauthorized || !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%d %v, want 401 with WWW-Authenticate: Bearer", a.status, a.header)
		}
		a = do(t, req{path: base + "/charges", key: "anon-1", body: `{}`, token: "not-a-token"})
		if a.status != http.StatusUnauthorized {
			t.Errorf("bad token: %d, want 401", a.status)
		}
	})
	t.Run("a business rejection is recorded and replayed", func(t *testing.T) {
		srv.Script(ns+"/reject-1", destination.Step{Status: 402, Body: `{"code":"card_declined"}`})
		a := do(t, req{path: base + "/charges", key: "reject-1", body: `{"amount":3}`, token: tok})
		if a.status != http.StatusPaymentRequired || a.header.Get(gateway.HeaderPhase) != "Failed" || !strings.Contains(a.body, "card_declined") {
			t.Fatalf("%d %v %s, want the recorded 402", a.status, a.header, a.body)
		}
		a = do(t, req{gw: 1, path: base + "/charges", key: "reject-1", body: `{"amount":3}`, token: tok})
		if a.status != http.StatusPaymentRequired || a.header.Get(gateway.HeaderReplayed) != "true" {
			t.Errorf("repeat %d %v, want the 402 replayed", a.status, a.header)
		}
	})
	t.Run("in progress: 202 with Location, then 409 with Retry-After, then the replay", func(t *testing.T) {
		srv.Script(ns+"/slow-1", destination.Step{Delay: 3 * time.Second})
		a := do(t, req{path: base + "/charges", key: "slow-1", body: `{"amount":4}`, token: tok,
			headers: map[string]string{"Prefer": "wait=0"}})
		loc := "/v1/namespaces/" + ns + "/actions/slow-1"
		if a.status != http.StatusAccepted || a.header.Get("Location") != loc || a.header.Get("Preference-Applied") != "wait=0" {
			t.Fatalf("%d %v %s, want 202 with Location %s", a.status, a.header, a.body, loc)
		}
		a = do(t, req{gw: 1, path: base + "/charges", key: "slow-1", body: `{"amount":4}`, token: tok})
		if a.status != http.StatusConflict || a.header.Get("Retry-After") == "" {
			t.Fatalf("repeat while in progress: %d %v %s, want 409 with Retry-After", a.status, a.header, a.body)
		}
		if p := a.problem(t); p.Type != gateway.ProblemTypePrefix+"in-progress" || p.Phase == "" || p.Instance != loc {
			t.Errorf("problem %+v", p)
		}
		var st gateway.Status
		envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the status resource to say Succeeded"), func() bool {
			g := do(t, req{method: http.MethodGet, path: loc, token: tok})
			_ = json.Unmarshal([]byte(g.body), &st)
			return g.status == http.StatusOK && st.Phase == actionsv1alpha1.PhaseSucceeded
		})
		if st.Response == nil || st.Response.StatusCode != 201 || st.IdempotencyKey != "slow-1" || len(st.Conditions) == 0 {
			t.Errorf("status resource %+v", st)
		}
		a = do(t, req{path: base + "/charges", key: "slow-1", body: `{"amount":4}`, token: tok})
		if a.status != http.StatusCreated || a.header.Get(gateway.HeaderReplayed) != "true" {
			t.Errorf("after the outcome: %d %v, want the 201 replayed", a.status, a.header)
		}
		if n := srv.Effects(ns + "/slow-1"); n != 1 {
			t.Errorf("effects %d, want 1", n)
		}
	})
	t.Run("a wait ends with the outcome as soon as it is recorded", func(t *testing.T) {
		srv.Script(ns+"/wait-1", destination.Step{Delay: time.Second})
		start := time.Now()
		a := do(t, req{path: base + "/charges", key: "wait-1", body: `{"amount":5}`, token: tok,
			headers: map[string]string{"Prefer": "wait=30"}})
		if a.status != http.StatusCreated || a.header.Get("Preference-Applied") != "wait=30" {
			t.Fatalf("%d %v %s, want 201 after waiting", a.status, a.header, a.body)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("the answer took %s: the wait did not end at the outcome", d)
		}
	})
	t.Run("cluster destinations", func(t *testing.T) {
		_, url := envtestutil.DestinationServer(t, destination.Options{})
		cd := &actionsv1alpha1.ClusterDestination{ObjectMeta: metav1.ObjectMeta{Name: ns + "-cd"},
			Spec: actionsv1alpha1.ClusterDestinationSpec{DestinationSpec: actionsv1alpha1.DestinationSpec{URL: url},
				Response: &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{}}}}
		env.Create(t, cd)
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cd) })
		a := do(t, req{path: "/v1/namespaces/" + ns + "/clusterdestinations/" + cd.Name + "/hooks", key: "cd-1", body: `{}`, token: tok})
		if a.status != http.StatusCreated {
			t.Fatalf("%d %s", a.status, a.body)
		}
		if xa := env.Get(t, ns, "cd-1"); xa.Spec.DestinationRef.Kind != "ClusterDestination" {
			t.Errorf("destinationRef %+v", xa.Spec.DestinationRef)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		body := scrape(t, 1)
		for _, want := range []string{`actionledger_gateway_replays_total{source="object"}`,
			`actionledger_gateway_requests_total{code="409",method="post"}`, "actionledger_gateway_time_to_first_byte_seconds_bucket"} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics of gateway 1 lack %s", want)
			}
		}
		if body := scrape(t, 0); !strings.Contains(body, `actionledger_gateway_waits_total{result="terminal"}`) ||
			!strings.Contains(body, `actionledger_gateway_waits_total{result="timeout"}`) {
			t.Errorf("metrics of gateway 0 lack the waits")
		}
	})
}

// scrape reads gateway i's /metrics as a ServiceAccount allowed get on /metrics, after checking that a caller
// without that right is refused.
func scrape(t *testing.T, i int) string {
	t.Helper()
	get := func(tok string) (int, string) {
		r, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, metrics[i]+"/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ns := env.Namespace(t)
	if code, _ := get(caller(t, ns, "nobody")); code != http.StatusForbidden {
		t.Errorf("metrics without the right: %d, want 403", code)
	}
	tok := caller(t, ns, "prometheus")
	ctx := context.Background()
	mustRBAC(t, ctx, ns)
	code, body := get(tok)
	if code != http.StatusOK {
		t.Fatalf("metrics: %d %s", code, body)
	}
	return body
}

// Two replicas and many identical requests racing on one key: one effect at the destination; exactly one
// request (the one whose create won) answers the outcome first-hand, every other one a replay or 409.
func TestRaceOnOneKey(t *testing.T) {
	ns := env.Namespace(t)
	srv := dest(t, ns, destination.Options{CommitDelay: 500 * time.Millisecond}, nil)
	tok := caller(t, ns, "checkout", "create", "get")
	const n = 10
	answers := make([]answer, n)
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-startGate
			answers[i] = do(t, req{gw: i % 2, path: "/v1/namespaces/" + ns + "/destinations/shop/charges",
				key: "race-1", body: `{"amount":7}`, token: tok})
		})
	}
	close(startGate)
	wg.Wait()
	first, replays, conflicts := 0, 0, 0
	for i, a := range answers {
		switch {
		case a.status == http.StatusCreated && a.header.Get(gateway.HeaderReplayed) == "":
			first++
		case a.status == http.StatusCreated:
			replays++
		case a.status == http.StatusConflict && a.header.Get("Retry-After") != "":
			conflicts++
		default:
			t.Errorf("request %d (gateway %d): %d %v %s", i, i%2, a.status, a.header, a.body)
		}
	}
	if first != 1 || first+replays+conflicts != n {
		t.Errorf("%d first-hand answers, %d replays, %d conflicts: want exactly one first-hand answer", first, replays, conflicts)
	}
	if e := srv.Effects(ns + "/race-1"); e != 1 {
		t.Errorf("effects at the destination %d, want 1", e)
	}
	if c := count(t, ns); c != 1 {
		t.Errorf("%d ExternalActions, want 1", c)
	}
}

// A caller without rights in a namespace gets 403 and nothing is created; one with get but not create cannot
// make a new key but may repeat an existing one.
func TestAuthorization(t *testing.T) {
	ns, other := env.Namespace(t), env.Namespace(t)
	srv := dest(t, ns, destination.Options{}, nil)
	dest(t, other, destination.Options{}, nil)
	tok := caller(t, ns, "checkout", "create", "get")
	reader := caller(t, ns, "reader", "get")

	a := do(t, req{path: "/v1/namespaces/" + other + "/destinations/shop/charges", key: "steal-1", body: `{}`, token: tok})
	if a.status != http.StatusForbidden {
		t.Fatalf("another namespace: %d %s, want 403", a.status, a.body)
	}
	if p := a.problem(t); p.Type != gateway.ProblemTypePrefix+"forbidden" {
		t.Errorf("problem %+v", p)
	}
	// The create is the caller's own (impersonation): the API server's RBAC refuses it, and says so.
	if a := do(t, req{path: "/v1/namespaces/" + ns + "/destinations/shop/charges", key: "new-1", body: `{}`, token: reader}); a.status != http.StatusForbidden ||
		!strings.Contains(a.body, `cannot create resource \"externalactions\"`) {
		t.Errorf("get-only caller with a new key: %d %s, want 403 with the API server's refusal", a.status, a.body)
	}
	envtestutil.Consistently(t, 2*time.Second, envtestutil.Say("no ExternalAction to be created by a forbidden request"), func() bool {
		return count(t, other) == 0 && count(t, ns) == 0
	})
	if a := do(t, req{path: "/v1/namespaces/" + ns + "/destinations/shop/charges", key: "mine-1", body: `{}`, token: tok}); a.status != http.StatusCreated {
		t.Fatalf("own namespace: %d %s", a.status, a.body)
	}
	if a := do(t, req{path: "/v1/namespaces/" + ns + "/destinations/shop/charges", key: "mine-1", body: `{}`, token: reader}); a.status != http.StatusCreated ||
		a.header.Get(gateway.HeaderReplayed) != "true" {
		t.Errorf("get-only caller repeating: %d %v, want the replay", a.status, a.header)
	}
	// A Role limited by resourceNames is honoured: the namespace-wide check is denied, the named one allowed.
	named := caller(t, ns, "named")
	if err := env.Client.Create(context.Background(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "named"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{actionsv1alpha1.GroupVersion.Group}, Resources: []string{"externalactions"},
			Verbs: []string{"get"}, ResourceNames: []string{"mine-1"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "named"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "named"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "named", Namespace: ns}}}); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("a resourceNames Role to allow the repeat"), func() bool {
		a := do(t, req{path: "/v1/namespaces/" + ns + "/destinations/shop/charges", key: "mine-1", body: `{}`, token: named})
		return a.status == http.StatusCreated && a.header.Get(gateway.HeaderReplayed) == "true"
	})
	if a := do(t, req{method: http.MethodGet, path: "/v1/namespaces/" + ns + "/actions/other-1", token: named}); a.status != http.StatusForbidden {
		t.Errorf("a name outside resourceNames: %d, want 403", a.status)
	}
	if a := do(t, req{method: http.MethodGet, path: "/v1/namespaces/" + ns + "/actions/mine-1", token: reader}); a.status != http.StatusOK {
		t.Errorf("status resource for a reader: %d", a.status)
	}
	if e := srv.Effects(ns + "/mine-1"); e != 1 {
		t.Errorf("effects %d, want 1", e)
	}
}

// Rows 5 and 6 of issue 23, through the real gateway and RBAC. A caller who may not get externalactions in
// the namespace receives the same bytes for a key an action holds and for a free key (before, the first said
// "may not get" and the second "may not create": an existence oracle), and a caller with create but not get
// cannot create (before, it got the new action's outcome, which may be the controller's replay of a tombstone
// the gateway does not see).
func TestForbiddenAnswersDoNotTellWhetherAKeyExists(t *testing.T) {
	ns := env.Namespace(t)
	dest(t, ns, destination.Options{}, nil)
	path := "/v1/namespaces/" + ns + "/destinations/shop/charges"
	owner := caller(t, ns, "checkout", "create", "get")
	if a := do(t, req{path: path, key: "held-1", body: `{"amount":1}`, token: owner}); a.status != http.StatusCreated {
		t.Fatalf("owner: %d %s", a.status, a.body)
	}
	for _, who := range []struct {
		name  string
		verbs []string
	}{{"nobody", nil}, {"creator", []string{"create"}}} {
		t.Run(who.name, func(t *testing.T) {
			tok := caller(t, ns, who.name, who.verbs...)
			held := do(t, req{path: path, key: "held-1", body: `{"amount":1}`, token: tok})
			free := do(t, req{gw: 1, path: path, key: "free-" + who.name, body: `{"amount":1}`, token: tok})
			for _, a := range []answer{held, free} {
				if a.status != http.StatusForbidden {
					t.Fatalf("%d %s, want 403", a.status, a.body)
				}
			}
			held.header.Del("Date")
			free.header.Del("Date")
			if held.body != free.body || !equalHeaders(held.header, free.header) {
				t.Errorf("held key: %v %s\nfree key: %v %s\nthe answers differ, so they tell whether a key exists",
					held.header, held.body, free.header, free.body)
			}
			if !strings.Contains(free.body, "may not get externalactions") {
				t.Errorf("free key: %s, want the get refusal", free.body)
			}
			if n := count(t, ns); n != 1 {
				t.Errorf("%d ExternalActions in the namespace, want only the owner's", n)
			}
		})
	}
}

// Row 10 of issue 23: the gateway creates as its caller (constrained impersonation), so the API server's
// admission sees the caller: with config/admission/requested_by_policy.yaml installed the requested-by
// annotation, which the policy sets from request.userInfo, names the caller and not the gateway's
// ServiceAccount; and the API server's own RBAC decides the create (the gateway's ServiceAccount may not create
// ExternalActions itself, config/gateway/role.yaml).
func TestGatewayActsAsItsCaller(t *testing.T) {
	ns := env.Namespace(t)
	dest(t, ns, destination.Options{}, nil)
	env.InstallAdmissionPolicy(t, envtestutil.RequestedByPolicyFile, ns, func(p *actionsv1alpha1.ExternalAction) bool {
		return p.Annotations[gateway.AnnotationRequestedBy] != ""
	})
	tok := caller(t, ns, "checkout", "create", "get")
	a := do(t, req{path: "/v1/namespaces/" + ns + "/destinations/shop/charges", key: "as-caller-1", body: `{}`, token: tok})
	if a.status != http.StatusCreated {
		t.Fatalf("%d %s, want 201", a.status, a.body)
	}
	xa := env.Get(t, ns, "as-caller-1")
	if got, want := xa.Annotations[gateway.AnnotationRequestedBy], "system:serviceaccount:"+ns+":checkout"; got != want {
		t.Errorf("requested-by %q (set at admission from request.userInfo), want the caller %q", got, want)
	}
	var gw rbacv1.ClusterRole
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "gateway-role"}, &gw); err != nil {
		t.Fatal(err)
	}
	for _, r := range gw.Rules {
		if slices.Contains(r.Resources, "externalactions") && slices.Contains(r.Verbs, "create") {
			t.Errorf("the gateway's ClusterRole lets it create ExternalActions as itself: %v", r)
		}
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// After the object is collected its tombstone answers: the recorded response (status code, kept headers and
// body) is replayed, nothing is sent, and another body under the key is still 422.
func TestTombstoneReplay(t *testing.T) {
	ns := env.Namespace(t)
	srv := dest(t, ns, destination.Options{}, func(s *actionsv1alpha1.DestinationSpec) {
		s.Retention = &actionsv1alpha1.Retention{TTLAfterFinished: &metav1.Duration{Duration: time.Second}}
	})
	tok := caller(t, ns, "checkout", "create", "get")
	path := "/v1/namespaces/" + ns + "/destinations/shop/charges"
	first := do(t, req{path: path, key: "gone-1", body: `{"amount":8}`, token: tok})
	if first.status != http.StatusCreated || first.body == "" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	// The gateway's own cache must see the tombstone and not the object any more.
	envtestutil.Eventually(t, 60*time.Second, envtestutil.Say("the gateway's status resource to come from the tombstone"), func() bool {
		var st gateway.Status
		g := do(t, req{method: http.MethodGet, path: "/v1/namespaces/" + ns + "/actions/gone-1", token: tok})
		return g.status == http.StatusOK && json.Unmarshal([]byte(g.body), &st) == nil && st.Tombstone
	})
	a := do(t, req{path: path, key: "gone-1", body: `{"amount":8}`, token: tok})
	if a.status != http.StatusCreated || a.header.Get(gateway.HeaderReplayed) != "true" ||
		a.header.Get(gateway.HeaderReplayedFrom) != "tombstone" || a.header.Get(gateway.HeaderBodyTruncated) != "" ||
		a.body != first.body || a.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Fatalf("replay after collection: %d %v %s; want the first answer's body %s", a.status, a.header, a.body, first.body)
	}
	if a := do(t, req{path: path, key: "gone-1", body: `{"amount":9}`, token: tok}); a.status != http.StatusUnprocessableEntity {
		t.Errorf("another body after collection: %d %s, want 422", a.status, a.body)
	}
	if e := srv.Requests(ns + "/gone-1"); e != 1 {
		t.Errorf("destination requests %d, want 1", e)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "gone-1"}, &actionsv1alpha1.ExternalAction{}); !apierrors.IsNotFound(err) {
		t.Errorf("the replay re-created the object: %v", err)
	}
}

func mustRBAC(t *testing.T, ctx context.Context, ns string) {
	t.Helper()
	name := ns + "-metrics"
	if err := env.Client.Create(ctx, clusterRoleMetrics(name)); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, clusterBinding(name, ns, "prometheus")); err != nil {
		t.Fatal(err)
	}
}
