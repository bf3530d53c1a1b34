package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// readCache is an informer cache that holds objs and counts every read, to prove which requests read nothing.
type readCache struct {
	*informertest.FakeInformers
	mu    sync.Mutex
	objs  map[types.NamespacedName][]client.Object
	reads int
}

func (c *readCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	for _, o := range c.objs[key] {
		switch src := o.(type) {
		case *actionsv1alpha1.ExternalAction:
			if dst, ok := obj.(*actionsv1alpha1.ExternalAction); ok {
				src.DeepCopyInto(dst)
				return nil
			}
		case *actionsv1alpha1.ActionTombstone:
			if dst, ok := obj.(*actionsv1alpha1.ActionTombstone); ok {
				src.DeepCopyInto(dst)
				return nil
			}
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{Group: actionsv1alpha1.GroupVersion.Group}, key.Name)
}

func (c *readCache) readCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// authzGateway is a Gateway over a readCache holding, in namespace "shop", the Succeeded action "known-1" and
// the tombstone of "buried-1" (both for a POST /charges with body {"amount":1}), and fake API clients that
// count calls. Callers are named by their token; rights maps each caller to the verbs it may use on
// externalactions in "shop", both for the SubjectAccessReviews and for the API server, which authorizes the
// requests the gateway makes as the caller (the user in the request's context, as ImpersonatingConfig sends
// it) and refuses them with 403 as RBAC would.
func authzGateway(t *testing.T, rights map[string][]string) (*Gateway, *readCache, *int) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	spec := actionsv1alpha1.ExternalActionSpec{
		DestinationRef: actionsv1alpha1.DestinationReference{Kind: "Destination", Name: "shop"},
		Request: actionsv1alpha1.ActionRequest{Method: http.MethodPost, Path: "/charges",
			Body: &apiextensionsv1.JSON{Raw: []byte(`{"amount":1}`)}},
	}
	known := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "known-1"}, Spec: spec}
	known.Status.Phase = actionsv1alpha1.PhaseSucceeded
	known.Status.Response = &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"1"}`}
	fp := fingerprintOf(known)
	buried := &actionsv1alpha1.ActionTombstone{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "buried-1"},
		Spec: actionsv1alpha1.ActionTombstoneSpec{Key: "shop/buried-1", Fingerprint: fp, Phase: actionsv1alpha1.PhaseSucceeded,
			StatusCode: 201, ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour))}}
	ca := &readCache{FakeInformers: &informertest.FakeInformers{Scheme: scheme}, objs: map[types.NamespacedName][]client.Object{
		{Namespace: "shop", Name: "known-1"}:  {known},
		{Namespace: "shop", Name: "buried-1"}: {buried},
	}}
	calls := new(int)
	allowed := func(u user.Info, verb string) bool { return u != nil && slices.Contains(rights[u.GetName()], verb) }
	// check counts a call and, for the client acting as callers, authorizes it as the API server would.
	check := func(ctx context.Context, asCaller bool, verb, name string) error {
		*calls++
		if !asCaller {
			return nil
		}
		u, _ := ctx.Value(callerKey{}).(user.Info)
		if !allowed(u, verb) {
			return apierrors.NewForbidden(schema.GroupResource{Group: actionsv1alpha1.GroupVersion.Group, Resource: "externalactions"},
				name, errors.New("RBAC: access denied"))
		}
		return nil
	}
	newClient := func(asCaller bool) client.Client {
		return fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
				if err := check(ctx, asCaller, "get", k.Name); err != nil {
					return err
				}
				return c.Get(ctx, k, o, opts...)
			},
			Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
				if err := check(ctx, asCaller, "create", o.GetName()); err != nil {
					return err
				}
				return c.Create(ctx, o, opts...)
			},
		}).Build()
	}
	authn := authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		name := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, name != "", nil
	})
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetNamespace() == "shop" && a.GetResource() == "externalactions" && allowed(a.GetUser(), a.GetVerb()) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	g, err := New(t.Context(), newClient(false), newClient(true), ca, Options{Authenticator: authn, Authorizer: authz, DefaultWait: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	return g, ca, calls
}

// post sends POST /v1/namespaces/shop/destinations/shop/charges with the key and body {"amount":1} as caller.
func post(g *Gateway, caller, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(context.Background(), http.MethodPost,
		"/v1/namespaces/shop/destinations/shop/charges", strings.NewReader(`{"amount":1}`))
	r.Header.Set("Authorization", "Bearer "+caller)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	g.Handler().ServeHTTP(w, r)
	return w
}

// Rows 5 and 6 of issue 23. A caller who may not get externalactions is refused before the gateway reads its
// cache or the API server, with the same bytes for a key held by an action, a key held by a tombstone and a
// free key (no existence oracle), and a caller with create but not get cannot create either (a new object may
// be answered with the controller's replay of a tombstone the gateway does not see).
func TestAuthorizeGetBeforeAnyRead(t *testing.T) {
	for _, caller := range []string{"nobody", "creator"} {
		t.Run(caller, func(t *testing.T) {
			g, ca, calls := authzGateway(t, map[string][]string{"creator": {"create"}})
			var first *httptest.ResponseRecorder
			for _, key := range []string{"known-1", "buried-1", "new-1"} {
				w := post(g, caller, key)
				if w.Code != http.StatusForbidden {
					t.Fatalf("%s with key %s: %d %s, want 403", caller, key, w.Code, w.Body)
				}
				if !strings.Contains(w.Body.String(), "may not get externalactions") {
					t.Errorf("%s with key %s: %s, want the get refusal", caller, key, w.Body)
				}
				if first == nil {
					first = w
					continue
				}
				if w.Body.String() != first.Body.String() || !equalHeaders(w.Header(), first.Header()) {
					t.Errorf("key %s answered %v %s, key known-1 answered %v %s: the answer tells whether a key exists",
						key, w.Header(), w.Body, first.Header(), first.Body)
				}
			}
			if n := ca.readCount(); n != 0 {
				t.Errorf("%d cache reads before the caller was authorized, want 0", n)
			}
			if *calls != 0 {
				t.Errorf("%d API calls for a caller who may not get, want 0", *calls)
			}
		})
	}
}

// A caller who may get but not create repeats held keys (the action's and the tombstone's outcome) but cannot
// create a new one: the create is made as the caller, and the API server's refusal is the same 403 as a
// SubjectAccessReview's; one who may do both creates it.
func TestCreateNeedsCreateAfterGet(t *testing.T) {
	g, _, calls := authzGateway(t, map[string][]string{"reader": {"get"}, "owner": {"get", "create"}})
	for key, want := range map[string]int{"known-1": http.StatusCreated, "buried-1": http.StatusCreated} {
		if w := post(g, "reader", key); w.Code != want || w.Header().Get(HeaderReplayed) != "true" {
			t.Errorf("reader repeating %s: %d %v %s, want %d replayed", key, w.Code, w.Header(), w.Body, want)
		}
	}
	w := post(g, "reader", "new-1")
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), ProblemTypePrefix+"forbidden") ||
		!strings.Contains(w.Body.String(), "RBAC: access denied") {
		t.Errorf("reader with a new key: %d %s, want 403 with the API server's refusal of the create", w.Code, w.Body)
	}
	if *calls != 1 {
		t.Errorf("%d API calls for answers from the cache and a refused create, want the one create", *calls)
	}
	if w := post(g, "owner", "new-1"); w.Code != http.StatusAccepted {
		t.Errorf("owner with a new key: %d %s, want 202 (the action was created and has not finished)", w.Code, w.Body)
	}
	if *calls != 2 {
		t.Errorf("%d API calls after the owner's new key, want the two creates", *calls)
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

// Issue 40 row 7: the gateway refuses to start forwarding a routing-override header, which the API server
// refuses in every action it would create.
func TestForwardHeadersRefuseRoutingHeaders(t *testing.T) {
	authn := authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) { return nil, false, nil })
	authz := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", nil
	})
	_, err := New(t.Context(), nil, nil, nil, Options{Authenticator: authn, Authorizer: authz,
		ForwardHeaders: []string{"X-Request-Id", "X-Forwarded-Prefix"}})
	if err == nil || !strings.Contains(err.Error(), "X-Forwarded-Prefix") {
		t.Fatalf("New = %v, want a refusal naming X-Forwarded-Prefix", err)
	}
}
