package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
)

// A client of ImpersonatingConfig sends the caller of the request's context as impersonation headers: a
// ServiceAccount by its name alone (constrained impersonation's serviceaccount mode), any other user with its
// UID, groups and extra; without a caller nothing is sent.
func TestImpersonatingConfig(t *testing.T) {
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Clone())
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	hc, err := rest.HTTPClientFor(ImpersonatingConfig(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	send := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/apis", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}

	if err := send(context.Background()); !errors.Is(err, errNoCaller) || len(got) != 0 {
		t.Fatalf("without a caller: err %v, %d requests sent; want errNoCaller and none", err, len(got))
	}
	sa := &user.DefaultInfo{Name: "system:serviceaccount:shop:checkout", UID: "u-1",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:shop", "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1"}}}
	if err := send(asCaller(context.Background(), sa)); err != nil {
		t.Fatal(err)
	}
	h := got[0]
	var impersonation []string
	for k := range h {
		if strings.HasPrefix(k, "Impersonate-") {
			impersonation = append(impersonation, k)
		}
	}
	if h.Get("Impersonate-User") != sa.Name || len(impersonation) != 1 {
		t.Errorf("ServiceAccount caller: impersonation headers %v (%v), want Impersonate-User only", impersonation, h)
	}
	person := &user.DefaultInfo{Name: "jane@example.com", UID: "06f6ce97", Groups: []string{"payments", "system:authenticated"},
		Extra: map[string][]string{"scopes": {"view", "development"}}}
	if err := send(asCaller(context.Background(), person)); err != nil {
		t.Fatal(err)
	}
	h = got[1]
	if h.Get("Impersonate-User") != person.Name || h.Get("Impersonate-Uid") != person.UID ||
		!slices.Equal(h.Values("Impersonate-Group"), person.Groups) ||
		!slices.Equal(h.Values("Impersonate-Extra-Scopes"), person.Extra["scopes"]) {
		t.Errorf("user caller: headers %v, want user, UID, groups and extra", h)
	}
}
