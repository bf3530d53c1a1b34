package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/gateway"
)

// caller creates the ServiceAccount name in ns, grants it verbs on externalactions there, and returns its token.
func caller(t *testing.T, ns, name string, verbs ...string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(verbs) > 0 {
		if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{actionsv1alpha1.GroupVersion.Group},
				Resources: []string{"externalactions"}, Verbs: verbs}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := requestToken(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// req is one gateway request.
type req struct {
	gw      int // replica index
	method  string
	path    string
	key     string // Idempotency-Key header value; "" sends none
	body    string
	token   string
	headers map[string]string
}

// answer is a gateway response.
type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) problem(t *testing.T) gateway.Problem {
	t.Helper()
	var p gateway.Problem
	if ct := a.header.Get("Content-Type"); ct != gateway.ProblemContentType {
		t.Fatalf("Content-Type %q, want %s (status %d, body %s)", ct, gateway.ProblemContentType, a.status, a.body)
	}
	if err := json.Unmarshal([]byte(a.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", a.body, err)
	}
	if p.Status != a.status {
		t.Errorf("problem status %d, answer status %d", p.Status, a.status)
	}
	return p
}

func do(t testing.TB, r req) answer {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	hr, err := http.NewRequestWithContext(context.Background(), r.method, gateways[r.gw]+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.key != "" {
		hr.Header.Set("Idempotency-Key", r.key)
	}
	if r.token != "" {
		hr.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.headers {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// count is the number of ExternalActions in ns.
func count(t *testing.T, ns string) int {
	t.Helper()
	l := &actionsv1alpha1.ExternalActionList{}
	if err := env.Client.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

func clusterRoleMetrics(name string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
}

func clusterBinding(name, ns, sa string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
}
