package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/fingerprint"
)

const (
	// AnnotationKey holds the client's Idempotency-Key on the ExternalAction the gateway creates (the object's
	// name is the key only when the key is a valid object name; ObjectName).
	AnnotationKey = "actions.actionledger.dev/idempotency-key"
	// AnnotationRequestedBy holds the Kubernetes user name of the caller that created the object. The gateway
	// sets it, and the MutatingAdmissionPolicy of config/admission/requested_by_policy.yaml sets it again from
	// the create's request.userInfo (which, since the gateway impersonates its caller, is the caller), so that
	// no one can write another name into it.
	AnnotationRequestedBy = "actions.actionledger.dev/requested-by"

	// MaxBodyBytes bounds a request body (64 KiB, the ExternalAction's request body cap); a larger one gets 413.
	MaxBodyBytes = 64 << 10

	// DefaultWait is how long a new request waits for a terminal phase without a Prefer: wait.
	DefaultWait = 10 * time.Second
	// DefaultMaxWait caps Prefer: wait.
	DefaultMaxWait = 60 * time.Second
)

// Options configure a Gateway.
type Options struct {
	// DefaultWait is the wait without a Prefer: wait (default DefaultWait); MaxWait caps it (default
	// DefaultMaxWait).
	DefaultWait, MaxWait time.Duration
	// ForwardHeaders are the request headers copied into spec.request.headers (and so into the fingerprint).
	// The CRD refuses Authorization, Idempotency-Key and the hop-by-hop headers; such a request gets 400.
	ForwardHeaders []string
	// Authenticator checks the caller's bearer token (a delegating TokenReview authenticator).
	Authenticator authenticator.Request
	// Authorizer checks the caller's access (a delegating SubjectAccessReview authorizer): get on the key's
	// ExternalAction before anything is read from the cache, which holds what the gateway's own identity sees.
	Authorizer authorizer.Authorizer
	// Metrics, when set, counts the answers.
	Metrics *Metrics
	// Log receives structured logs; never a token, header value or body.
	Log logr.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Gateway is the HTTP handler. It creates ExternalActions, and reads them live, as the caller (callers, a
// client of ImpersonatingConfig); other reads come from cache (an informer cache of ExternalActions and
// ActionTombstones, as the gateway itself) and the live tombstone read after an AlreadyExists from client.
type Gateway struct {
	client   client.Client
	callers  client.Client
	cache    cache.Cache
	opts     Options
	notifier *notifier
	ready    func() bool
}

// New returns a Gateway over c (the gateway's own live tombstone reads), callers (ExternalAction creates and
// live reads as the request's caller: a client of ImpersonatingConfig) and ca (cached reads and change
// events, as the gateway). It registers its event handlers on ca's informers; ca must be started by the
// caller.
func New(ctx context.Context, c, callers client.Client, ca cache.Cache, o Options) (*Gateway, error) {
	if o.DefaultWait <= 0 {
		o.DefaultWait = DefaultWait
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Authenticator == nil || o.Authorizer == nil {
		return nil, errors.New("gateway: an authenticator and an authorizer are required")
	}
	for _, h := range o.ForwardHeaders {
		// The API server refuses an action that sets one (docs/security.md): every request forwarding it would fail.
		if actionsv1alpha1.RoutingHeader(h) {
			return nil, fmt.Errorf("--forward-headers names %s, a routing-override or forwarding header, which an "+
				"ExternalAction may not set (a proxy in front of the destination would route by it); remove it", h)
		}
	}
	g := &Gateway{client: c, callers: callers, cache: ca, opts: o, notifier: newNotifier()}
	inf, err := ca.GetInformer(ctx, &actionsv1alpha1.ExternalAction{})
	if err != nil {
		return nil, fmt.Errorf("informer for ExternalActions: %w", err)
	}
	if _, err := inf.AddEventHandler(g.notifier.handler()); err != nil {
		return nil, fmt.Errorf("event handler for ExternalActions: %w", err)
	}
	tinf, err := ca.GetInformer(ctx, &actionsv1alpha1.ActionTombstone{})
	if err != nil {
		return nil, fmt.Errorf("informer for ActionTombstones: %w", err)
	}
	g.ready = func() bool { return inf.HasSynced() && tinf.HasSynced() }
	return g, nil
}

// Handler returns the gateway's routes, instrumented when Options.Metrics is set.
func (g *Gateway) Handler() http.Handler {
	h := http.Handler(http.HandlerFunc(g.route))
	if g.opts.Metrics != nil {
		h = g.opts.Metrics.instrument(h)
	}
	return h
}

// target is a parsed action route.
type target struct {
	namespace string
	kind      string // Destination or ClusterDestination
	dest      string
	path      string // escaped path with query, as spec.request.path
	action    string // status route: the action's name
}

// probe answers /healthz (the process serves) and /readyz (the informer cache has synced).
func (g *Gateway) probe(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		_, _ = io.WriteString(w, "ok")
	case "/readyz":
		if !g.ready() {
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	default:
		http.NotFound(w, r)
	}
}

func (g *Gateway) route(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
		g.probe(w, r)
		return
	}
	t, p := parseRoute(r.URL)
	if p != nil {
		writeProblem(w, *p)
		return
	}
	if t.action != "" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeProblem(w, problem(http.StatusMethodNotAllowed, "method-not-allowed", "method not allowed",
				"the status resource answers GET"))
			return
		}
		g.serveStatus(w, r, t)
		return
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		g.serveAction(w, r, t)
	default:
		w.Header().Set("Allow", "POST, PUT, PATCH, DELETE")
		writeProblem(w, problem(http.StatusMethodNotAllowed, "method-not-allowed", "method not allowed",
			"a destination route takes POST, PUT, PATCH or DELETE with an Idempotency-Key"))
	}
}

// parseRoute splits the escaped path into a target. The subpath is kept escaped, so that the API server's CRD
// rules on spec.request.path (no dot segments, no %2F, ...) judge what the client sent.
func parseRoute(u *url.URL) (target, *Problem) {
	notFound := problem(http.StatusNotFound, "not-found", "no such route",
		"routes are /v1/namespaces/{namespace}/destinations/{name}/{path}, .../clusterdestinations/{name}/{path} "+
			"and /v1/namespaces/{namespace}/actions/{name}")
	seg := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	if len(seg) < 5 || seg[0] != "v1" || seg[1] != "namespaces" {
		return target{}, &notFound
	}
	unesc := func(s string) string {
		v, err := url.PathUnescape(s)
		if err != nil {
			return ""
		}
		return v
	}
	t := target{namespace: unesc(seg[2])}
	if errs := validation.IsDNS1123Label(t.namespace); len(errs) > 0 {
		p := problem(http.StatusBadRequest, "invalid-namespace", "invalid namespace", "namespace: "+strings.Join(errs, "; "))
		return target{}, &p
	}
	name := unesc(seg[4])
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		p := problem(http.StatusBadRequest, "invalid-name", "invalid name", "name: "+strings.Join(errs, "; "))
		return target{}, &p
	}
	switch seg[3] {
	case "actions":
		if len(seg) != 5 {
			return target{}, &notFound
		}
		t.action = name
		return t, nil
	case "destinations":
		t.kind = "Destination"
	case "clusterdestinations":
		t.kind = "ClusterDestination"
	default:
		return target{}, &notFound
	}
	t.dest = name
	t.path = "/" + strings.Join(seg[5:], "/")
	if u.RawQuery != "" {
		t.path += "?" + u.RawQuery
	}
	return t, nil
}

// authenticate returns the caller, or answers 401.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request) (user.Info, bool) {
	res, ok, err := g.opts.Authenticator.AuthenticateRequest(r)
	if err != nil || !ok {
		if err != nil {
			g.opts.Log.V(1).Info("Authentication failed", "error", err.Error())
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="actionledger-gateway"`)
		writeProblem(w, problem(http.StatusUnauthorized, "unauthenticated", "authentication required",
			"send a Kubernetes bearer token (Authorization: Bearer ...), e.g. from kubectl create token"))
		return nil, false
	}
	return res.User, true
}

// authorize checks verb on externalactions in namespace (and name, for get), or answers 403 (503 when the
// check itself failed).
func (g *Gateway) authorize(w http.ResponseWriter, r *http.Request, u user.Info, verb, namespace, name string) bool {
	attrs := authorizer.AttributesRecord{
		User: u, Verb: verb, Namespace: namespace, Name: name, ResourceRequest: true,
		APIGroup: actionsv1alpha1.GroupVersion.Group, APIVersion: actionsv1alpha1.GroupVersion.Version,
		Resource: "externalactions",
	}
	// First without the name: a namespace-wide decision is cached once for every key (a replay then needs no
	// API call); only a denial asks again with the name, so that a Role limited by resourceNames still counts.
	// A create is never named (RBAC cannot restrict create by name).
	attrs.Name = ""
	d, _, err := g.opts.Authorizer.Authorize(r.Context(), attrs)
	if d != authorizer.DecisionAllow && verb != "create" && name != "" {
		attrs.Name = name
		d, _, err = g.opts.Authorizer.Authorize(r.Context(), attrs)
	}
	if d == authorizer.DecisionAllow {
		return true
	}
	if err != nil {
		g.opts.Log.Error(err, "Authorization check failed", "namespace", namespace, "verb", verb)
		writeProblem(w, problem(http.StatusServiceUnavailable, "authorization-unavailable",
			"the authorization check failed", "the SubjectAccessReview could not be made; try again"))
		return false
	}
	writeForbidden(w, u, verb, namespace)
	return false
}

// writeForbidden answers 403 for verb on externalactions in namespace. Its bytes depend on the caller, the verb
// and the namespace only, never on the key or on whether it exists.
func writeForbidden(w http.ResponseWriter, u user.Info, verb, namespace string) {
	writeProblem(w, problem(http.StatusForbidden, "forbidden", "forbidden",
		fmt.Sprintf("user %q may not %s externalactions.%s in namespace %q", u.GetName(), verb,
			actionsv1alpha1.GroupVersion.Group, namespace)))
}

// readBody reads the JSON body (at most MaxBodyBytes), or answers 413, 415 or 400.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			if r.ContentLength != 0 {
				writeProblem(w, problem(http.StatusUnsupportedMediaType, "unsupported-media-type",
					"the body must be JSON", "send Content-Type: application/json"))
				return nil, false
			}
		}
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeProblem(w, problem(http.StatusRequestEntityTooLarge, "body-too-large", "the body is too large",
				fmt.Sprintf("request bodies are at most %d bytes (64 KiB)", MaxBodyBytes)))
			return nil, false
		}
		writeProblem(w, problem(http.StatusBadRequest, "unreadable-body", "the body could not be read", ""))
		return nil, false
	}
	if len(strings.TrimSpace(string(raw))) == 0 {
		return nil, true
	}
	if !json.Valid(raw) {
		writeProblem(w, problem(http.StatusBadRequest, "invalid-body", "the body is not JSON",
			"the body must be one JSON value (RFC 8259)"))
		return nil, false
	}
	return raw, true
}

// Spec returns the ExternalAction spec a request creates: method, escaped path with query, the forwarded
// headers present on the request, and the body.
func (g *Gateway) spec(r *http.Request, t target, body []byte) actionsv1alpha1.ExternalActionSpec {
	s := actionsv1alpha1.ExternalActionSpec{
		DestinationRef: actionsv1alpha1.DestinationReference{Kind: t.kind, Name: t.dest},
		Request:        actionsv1alpha1.ActionRequest{Method: r.Method, Path: t.path},
	}
	for _, h := range g.opts.ForwardHeaders {
		if v := r.Header.Values(h); len(v) > 0 {
			if s.Request.Headers == nil {
				s.Request.Headers = map[string]actionsv1alpha1.HeaderValue{}
			}
			s.Request.Headers[http.CanonicalHeaderKey(h)] = actionsv1alpha1.HeaderValue(strings.Join(v, ", "))
		}
	}
	if body != nil {
		s.Request.Body = &apiextensionsv1.JSON{Raw: body}
	}
	return s
}

func (g *Gateway) serveAction(w http.ResponseWriter, r *http.Request, t target) {
	u, ok := g.authenticate(w, r)
	if !ok {
		return
	}
	key, err := ParseKey(r.Header.Values("Idempotency-Key"))
	if err != nil {
		slug := "invalid-key"
		if errors.Is(err, errNoKey) {
			slug = "missing-key"
		}
		writeProblem(w, problem(http.StatusBadRequest, slug, "an Idempotency-Key is required", err.Error()))
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	spec := g.spec(r, t, body)
	fp, err := fingerprint.Compute(&spec)
	if err != nil {
		writeProblem(w, problem(http.StatusBadRequest, "invalid-body", "the body is not JSON", err.Error()))
		return
	}
	obj := types.NamespacedName{Namespace: t.namespace, Name: ObjectName(key)}
	// get before anything is read: every answer below may carry an action's recorded outcome (a repeat, a
	// tombstone, or the controller's replay of a tombstone the gateway cannot see into the object it creates),
	// and a caller who may not get gets the same 403 whether the key exists or not.
	if !g.authorize(w, r, u, "get", obj.Namespace, obj.Name) {
		return
	}
	ctx := r.Context()
	xa := &actionsv1alpha1.ExternalAction{}
	if err := g.cache.Get(ctx, obj, xa); err == nil {
		if !xa.Status.Phase.Terminal() {
			// The cache may lag behind the outcome another replica has already seen: read once, live, before
			// answering 409 (a read per repeat while in progress, never a poll).
			live := &actionsv1alpha1.ExternalAction{}
			if err := g.callers.Get(asCaller(ctx, u), obj, live); err == nil {
				xa = live
			}
		}
		g.repeat(w, xa, key, fp)
		return
	}
	ts := &actionsv1alpha1.ActionTombstone{}
	if err := g.cache.Get(ctx, obj, ts); err == nil && g.opts.Now().Before(ts.Spec.ExpiresAt.Time) {
		g.tombstone(w, ts, fp)
		return
	}
	g.create(w, r, u, &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: obj.Name,
			Annotations: map[string]string{AnnotationKey: key, AnnotationRequestedBy: u.GetName()}},
		Spec: spec,
	}, fp)
}

// create creates xa as the caller u (impersonation): the API server's RBAC decides whether it may create, its
// admission sees the caller (and sets the requested-by annotation from it) and its audit log names the caller.
// A refusal tells a caller who may get that the key is free, which a GET of the status resource tells it too.
// fp is the request's fingerprint, for a repeat that won the race for the key.
func (g *Gateway) create(w http.ResponseWriter, r *http.Request, u user.Info, xa *actionsv1alpha1.ExternalAction, fp string) {
	obj := client.ObjectKeyFromObject(xa)
	log := g.opts.Log.WithValues("externalAction", obj.String())
	wait, applied := WaitPreference(r.Header.Values("Prefer"), g.opts.DefaultWait, g.opts.MaxWait)
	ctx, span := continueTrace(r, xa)
	defer span.End()
	err := g.callers.Create(asCaller(ctx, u), xa)
	switch {
	case apierrors.IsForbidden(err):
		// RBAC's refusal, or an admission policy's or webhook's: the API server's message says which. Only a
		// caller who may get reaches this, so naming the key tells it nothing new.
		log.V(1).Info("API server refused the create as the caller", "user", u.GetName(), "error", err.Error())
		writeProblem(w, problem(http.StatusForbidden, "forbidden", "forbidden", apiMessage(err)))
	case err == nil:
		log.V(1).Info("Created ExternalAction", "user", u.GetName())
		g.await(w, r, obj, xa, wait, applied)
	case apierrors.IsAlreadyExists(err):
		// Another request holds the key (perhaps on another replica, or the cache lags): a repeat, which get
		// (checked before) allows.
		g.repeatLive(w, r, u, obj, xa.Annotations[AnnotationKey], fp)
	case apierrors.IsInvalid(err):
		writeProblem(w, problem(http.StatusBadRequest, "invalid-request",
			"the API server refused the action", apiMessage(err)))
	default:
		log.Error(err, "Creating the ExternalAction")
		writeProblem(w, problem(http.StatusServiceUnavailable, "api-unavailable",
			"the action could not be created", "try again with the same Idempotency-Key"))
	}
}

// repeatLive answers a repeat of the key obj whose object the cache does not show yet, from a live read as the
// caller; an object collected between the create and the read is answered by its tombstone.
func (g *Gateway) repeatLive(w http.ResponseWriter, r *http.Request, u user.Info, obj types.NamespacedName, key, fp string) {
	ctx := r.Context()
	live := &actionsv1alpha1.ExternalAction{}
	err := g.callers.Get(asCaller(ctx, u), obj, live)
	if err == nil {
		g.repeat(w, live, key, fp)
		return
	}
	if apierrors.IsForbidden(err) {
		writeForbidden(w, u, "get", obj.Namespace)
		return
	}
	if apierrors.IsNotFound(err) {
		// Collected between the create and the read: its tombstone (written before the object went) answers,
		// else the client tries again.
		ts := &actionsv1alpha1.ActionTombstone{}
		if err := g.client.Get(ctx, obj, ts); err == nil && g.opts.Now().Before(ts.Spec.ExpiresAt.Time) {
			g.tombstone(w, ts, fp)
			return
		}
	}
	g.opts.Log.Error(err, "Reading the ExternalAction that holds the key", "externalAction", obj.String())
	w.Header().Set("Retry-After", "1")
	writeProblem(w, problem(http.StatusServiceUnavailable, "api-unavailable",
		"the key's action could not be read", "try again"))
}

// apiMessage is the API server's message of a refused create (the CRD's validation messages).
func apiMessage(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Message
	}
	return err.Error()
}

// fingerprintOf is the fingerprint bound to xa's key: status.fingerprint once the controller recorded it,
// else the fingerprint of its spec (which cannot change).
func fingerprintOf(xa *actionsv1alpha1.ExternalAction) string {
	if xa.Status.Fingerprint != "" {
		return xa.Status.Fingerprint
	}
	fp, err := fingerprint.Compute(&xa.Spec)
	if err != nil {
		return ""
	}
	return fp
}

// repeat answers a request whose key is held by xa: 422 for another fingerprint (or an object of a hashed name
// made for another key), the recorded outcome once
// terminal, else 409 with Retry-After.
func (g *Gateway) repeat(w http.ResponseWriter, xa *actionsv1alpha1.ExternalAction, key, fp string) {
	if bound := fingerprintOf(xa); bound != fp || !holdsKey(xa, key) {
		a := keyReused(xa.Namespace, xa.Name, string(xa.Status.Phase))
		writeAnswer(w, a)
		return
	}
	if a, ok := Decide(xa, true); ok {
		if a.Problem == nil && g.opts.Metrics != nil {
			g.opts.Metrics.replays.WithLabelValues("object").Inc()
		}
		writeAnswer(w, a)
		return
	}
	rsn, msg := reason(xa)
	p := problem(http.StatusConflict, "in-progress", "a request with this key is in progress",
		"the first request with this Idempotency-Key has not finished; retry later or GET the status resource"+
			ifMsg(msg))
	p.Instance, p.Phase, p.Reason = StatusPath(xa.Namespace, xa.Name), string(xa.Status.Phase), rsn
	if p.Phase == "" {
		p.Phase = string(actionsv1alpha1.PhasePending)
	}
	w.Header().Set("Retry-After", RetryAfter(xa, g.opts.Now()))
	w.Header().Set(HeaderAction, p.Instance)
	w.Header().Set(HeaderPhase, p.Phase)
	writeProblem(w, p)
}

func ifMsg(m string) string {
	if m == "" {
		return ""
	}
	return " (" + m + ")"
}

// holdsKey reports whether xa is the action of key: named by the key itself, or, under a hashed name, created
// for that key (AnnotationKey). An object of a hashed name made for another key, or by other means, answers as a
// reused key rather than handing one caller's outcome to another.
func holdsKey(xa *actionsv1alpha1.ExternalAction, key string) bool {
	return xa.Name == key || xa.Annotations[AnnotationKey] == key
}

func keyReused(namespace, name, phase string) Answer {
	p := problem(http.StatusUnprocessableEntity, "key-reused", "the idempotency key is bound to another request",
		"this Idempotency-Key was used with another method, path, forwarded headers or body; use a new key "+
			"for a new request")
	p.Instance, p.Phase, p.Reason = StatusPath(namespace, name), phase, actionsv1alpha1.ReasonFingerprintConflict
	h := http.Header{HeaderAction: {p.Instance}}
	if phase != "" {
		h.Set(HeaderPhase, phase)
	}
	return Answer{Status: p.Status, Problem: &p, Header: h}
}

// tombstone answers a request whose key's object was collected.
func (g *Gateway) tombstone(w http.ResponseWriter, ts *actionsv1alpha1.ActionTombstone, fp string) {
	if ts.Spec.Fingerprint != fp {
		writeAnswer(w, keyReused(ts.Namespace, ts.Name, string(ts.Spec.Phase)))
		return
	}
	a := DecideTombstone(ts)
	if a.Problem == nil && g.opts.Metrics != nil {
		g.opts.Metrics.replays.WithLabelValues("tombstone").Inc()
	}
	writeAnswer(w, a)
}

// await waits up to wait for the created action to reach a terminal phase, on the informer's events, and
// answers its outcome, else 202 with the status resource.
func (g *Gateway) await(w http.ResponseWriter, r *http.Request, obj types.NamespacedName,
	created *actionsv1alpha1.ExternalAction, wait time.Duration, applied bool) {
	start := g.opts.Now()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	last := created
	result := "timeout"
	defer func() {
		if g.opts.Metrics != nil {
			g.opts.Metrics.waits.WithLabelValues(result).Inc()
			g.opts.Metrics.waitDur.WithLabelValues(result).Observe(g.opts.Now().Sub(start).Seconds())
		}
	}()
	if applied {
		w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(wait/time.Second)))
	}
	for wait > 0 {
		changed, cancel := g.notifier.subscribe(obj)
		xa := &actionsv1alpha1.ExternalAction{}
		if err := g.cache.Get(r.Context(), obj, xa); err == nil {
			last = xa
			if a, ok := Decide(xa, false); ok {
				cancel()
				result = "terminal"
				writeAnswer(w, a)
				return
			}
		}
		select {
		case <-changed:
			cancel()
			continue
		case <-timer.C:
		case <-r.Context().Done():
		}
		cancel()
		break
	}
	path := StatusPath(obj.Namespace, obj.Name)
	st := StatusOf(last)
	if st.Phase == "" {
		st.Phase = actionsv1alpha1.PhasePending
	}
	w.Header().Set("Location", path)
	w.Header().Set(HeaderAction, path)
	w.Header().Set(HeaderPhase, string(st.Phase))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(mustJSON(st))
}

// writeAnswer writes a.
func writeAnswer(w http.ResponseWriter, a Answer) {
	maps.Copy(w.Header(), a.Header)
	if a.Problem != nil {
		writeProblem(w, *a.Problem)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(a.Body)))
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// serveStatus answers GET /v1/namespaces/{namespace}/actions/{name}.
func (g *Gateway) serveStatus(w http.ResponseWriter, r *http.Request, t target) {
	u, ok := g.authenticate(w, r)
	if !ok || !g.authorize(w, r, u, "get", t.namespace, t.action) {
		return
	}
	obj := types.NamespacedName{Namespace: t.namespace, Name: t.action}
	var st Status
	xa := &actionsv1alpha1.ExternalAction{}
	ts := &actionsv1alpha1.ActionTombstone{}
	switch {
	case g.cache.Get(r.Context(), obj, xa) == nil:
		st = StatusOf(xa)
	case g.cache.Get(r.Context(), obj, ts) == nil:
		st = StatusOfTombstone(ts)
	default:
		writeProblem(w, problem(http.StatusNotFound, "not-found", "no such action",
			fmt.Sprintf("no ExternalAction or tombstone %s", obj)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(mustJSON(st))
}
