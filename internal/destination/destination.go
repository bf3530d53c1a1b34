package destination

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/egress"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/redact"
	"github.com/actionledger/actionledger/internal/retry"
)

// KindClusterDestination is the destinationRef kind that names a cluster-scoped ClusterDestination.
const KindClusterDestination = "ClusterDestination"

// Policy defaults (CONTRACT "retryPolicy", "retention").
const (
	DefaultMaxAttempts      = 5
	DefaultInitialBackoff   = time.Second
	DefaultMaxBackoff       = 5 * time.Minute
	DefaultMultiplier       = 2.0
	DefaultDeadline         = time.Hour
	DefaultTTLAfterFinished = 24 * time.Hour
	DefaultTombstoneTTL     = 30 * 24 * time.Hour
	DefaultIdempotencyHdr   = "Idempotency-Key"
	DefaultKeyFormat        = "{namespace}/{name}"
)

// errSecretNotAllowed marks a Secret reference outside the namespace a destination may read.
var errSecretNotAllowed = errors.New("secret not allowed")

// errNamespaceNotAllowed marks an action whose namespace a ClusterDestination's namespaceSelector does not match.
var errNamespaceNotAllowed = errors.New("namespace not allowed")

// errInsecureSkipVerifyNotAllowed marks a namespaced Destination that turns TLS verification off while the
// manager does not allow it (--insecure-skip-verify-allowed).
var errInsecureSkipVerifyNotAllowed = errors.New("insecureSkipVerify not allowed")

// Reason maps a destination error to its condition reason (api/v1alpha1/conditions.go), or fallback.
func Reason(err error, fallback string) string {
	if nr, ok := errors.AsType[*destinationNotReady](err); ok {
		switch nr.reason {
		case actionsv1alpha1.ReasonSecretNotAllowed, actionsv1alpha1.ReasonNamespaceNotAllowed, actionsv1alpha1.ReasonEgressDenied,
			actionsv1alpha1.ReasonInsecureSkipVerifyNotAllowed, actionsv1alpha1.ReasonPathOutsideBase:
			return nr.reason
		}
		return actionsv1alpha1.ReasonDestinationNotReady
	}
	switch {
	case errors.Is(err, errSecretNotAllowed), errors.Is(err, errServiceAccountRequired), errors.Is(err, errServiceAccountNotFound):
		return actionsv1alpha1.ReasonSecretNotAllowed
	case errors.Is(err, errNamespaceNotAllowed):
		return actionsv1alpha1.ReasonNamespaceNotAllowed
	case errors.Is(err, errInsecureSkipVerifyNotAllowed):
		return actionsv1alpha1.ReasonInsecureSkipVerifyNotAllowed
	case egress.IsDenied(err):
		return actionsv1alpha1.ReasonEgressDenied
	case errors.Is(err, httpexec.ErrPathOutsideBase):
		return actionsv1alpha1.ReasonPathOutsideBase
	}
	return fallback
}

// CheckSpec checks what a destination needs before any action may use it, without reading Secrets:
// the base URL can be joined (httpexec.JoinURL), the post-check path template stays under it, and a namespaced
// Destination turns TLS verification off only when the manager allows it.
func CheckSpec(spec *actionsv1alpha1.DestinationSpec, owner string, namespaced, insecureSkipVerifyAllowed bool) error {
	if _, err := httpexec.JoinURL(spec.URL, "/"); err != nil {
		return fmt.Errorf("%s spec.url: %w", owner, err)
	}
	if rc := spec.Reconciliation; rc != nil {
		if _, err := httpexec.JoinURLEscapedValues(spec.URL, rc.Path); err != nil {
			return fmt.Errorf("%s spec.reconciliation.path: %w", owner, err)
		}
	}
	if namespaced && spec.TLS != nil && spec.TLS.InsecureSkipVerify && !insecureSkipVerifyAllowed {
		return fmt.Errorf("%w: %s sets spec.tls.insecureSkipVerify, but this manager does not allow namespaced "+
			"Destinations to turn TLS verification off (flag --insecure-skip-verify-allowed); nothing is sent. "+
			"Give spec.tls.caBundle instead, or ask the admin for a ClusterDestination", errInsecureSkipVerifyNotAllowed, owner)
	}
	return nil
}

// CheckRequestHeaders refuses an action whose spec.request.headers sets a routing-override or forwarding header
// (actionsv1alpha1.RoutingHeader: X-Original-URL, X-Rewrite-URL, X-Forwarded-*, X-HTTP-Method-Override,
// Forwarded, ...). Admission refuses them (the CEL rule on the CRD); this catches an action stored before that
// rule, whose spec is immutable: the controller ends it InvalidSpec before anything is sent. A proxy or framework
// in front of the provider would route by such a header, out of a ClusterDestination's base path and with its
// credentials (issue 40 row 7).
func CheckRequestHeaders(headers map[string]actionsv1alpha1.HeaderValue) error {
	var refused []string
	for k := range headers {
		if actionsv1alpha1.RoutingHeader(k) {
			refused = append(refused, k)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	slices.Sort(refused)
	return fmt.Errorf("spec.request.headers sets %s: routing-override or forwarding headers, which proxies and frameworks "+
		"in front of a destination route or authorize by, so they could move the request out of the destination's base "+
		"path, change its method or claim another client, with the destination's credentials; the API server refuses "+
		"them (this action was stored before that rule) and nothing is sent; create a new action without them",
		strings.Join(refused, ", "))
}

// NamespaceAllowed checks a ClusterDestination's namespaceSelector against the labels of namespace ns, read
// from the manager's metadata-only Namespace cache. No selector admits every namespace.
func NamespaceAllowed(ctx context.Context, c client.Reader, cd *actionsv1alpha1.ClusterDestination, ns string) error {
	if cd.Spec.NamespaceSelector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(cd.Spec.NamespaceSelector)
	if err != nil {
		return fmt.Errorf("ClusterDestination %q has an invalid spec.namespaceSelector: %w", cd.Name, err)
	}
	nsMeta := &metav1.PartialObjectMetadata{}
	nsMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Get(ctx, types.NamespacedName{Name: ns}, nsMeta); err != nil {
		return fmt.Errorf("reading namespace %q for ClusterDestination %q's namespaceSelector: %w", ns, cd.Name, err)
	}
	if !sel.Matches(labels.Set(nsMeta.Labels)) {
		return fmt.Errorf("%w: ClusterDestination %q admits only namespaces whose labels match %q "+
			"(spec.namespaceSelector), and namespace %q does not; nothing is sent until its labels match",
			errNamespaceNotAllowed, cd.Name, sel.String(), ns)
	}
	return nil
}

// Resolved is a destination with its policy defaulted; AuthHeader, Redactor and TLS are set by
// LoadCredentials, right before a send.
type Resolved struct {
	// ID is the limiter and metrics identity: "Destination/<ns>/<name>" or "ClusterDestination/<name>".
	ID           string
	Spec         *actionsv1alpha1.DestinationSpec
	Timeout      time.Duration
	KeyHeader    string
	KeySupported bool
	AuthHeader   http.Header
	// Redactor replaces the Secret values sent in AuthHeader in whatever is stored or emitted (DESIGN rule 11).
	Redactor *redact.Redactor
	TLS      *httpexec.TLSOptions
	// OAuth2 is spec.auth.oauth2 with its Secrets read (nil without it): each request gets a token from the
	// reconciler's TokenCache (see authorize).
	OAuth2 *httpexec.ClientCredentials
	// Signer signs each request (spec.signing; nil without it).
	Signer      httpexec.Signer
	Policy      retry.Policy // Deadline still relative: see policyFor
	DeadlineDur time.Duration
	Limits      limiter.Limits
	// MaxInFlight is spec.concurrency.maxInFlight (0: the dispatcher's default, dispatch.DefaultMaxInFlight).
	MaxInFlight  int
	Retention    time.Duration
	TombstoneTTL time.Duration
	// secretNS is the only namespace whose Secrets LoadCredentials may read; cluster is true for a
	// ClusterDestination.
	secretNS string
	cluster  bool
	// expose is what the action's namespace may read of the responses (a ClusterDestination's
	// spec.response.expose; nil: the whole response). LoadCredentials puts it into Redactor.
	expose *redact.Exposure
	// ready is the destination's Ready condition as its validator wrote it (nil before the first validation),
	// and generation its metadata.generation.
	ready      *metav1.Condition
	generation int64
	// tokens and clock serve Authorize (set by LoadCredentials).
	tokens func() (*httpexec.TokenCache, error)
	clock  clock.PassiveClock
}

// Resolve reads the action's Destination or ClusterDestination and defaults its policy. It
// reads no Secret (LoadCredentials does, right before a send).
func (r *Resolver) Resolve(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (*Resolved, error) {
	ref := xa.Spec.DestinationRef
	var spec *actionsv1alpha1.DestinationSpec
	var id, secretNS string
	var ready *metav1.Condition
	var generation int64
	var expose *redact.Exposure
	switch ref.Kind {
	case KindClusterDestination:
		cd := &actionsv1alpha1.ClusterDestination{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: ref.Name}, cd); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("destination not found: ClusterDestination %q", ref.Name)
			}
			return nil, fmt.Errorf("reading ClusterDestination %q: %w", ref.Name, err)
		}
		if err := NamespaceAllowed(ctx, r.Client, cd, xa.Namespace); err != nil {
			return nil, err
		}
		spec, id, secretNS = &cd.Spec.DestinationSpec, "ClusterDestination/"+ref.Name, r.ControllerNamespace
		ready, generation = meta.FindStatusCondition(cd.Status.Conditions, actionsv1alpha1.ConditionReady), cd.Generation
		expose = Exposure(cd)
	default:
		d := &actionsv1alpha1.Destination{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: xa.Namespace, Name: ref.Name}, d); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("destination not found: Destination %s/%s", xa.Namespace, ref.Name)
			}
			return nil, fmt.Errorf("reading Destination %s/%s: %w", xa.Namespace, ref.Name, err)
		}
		spec, id, secretNS = &d.Spec, "Destination/"+xa.Namespace+"/"+ref.Name, xa.Namespace
		ready, generation = meta.FindStatusCondition(d.Status.Conditions, actionsv1alpha1.ConditionReady), d.Generation
	}
	if err := CheckSpec(spec, id, ref.Kind != KindClusterDestination, r.InsecureSkipVerifyAllowed); err != nil {
		return nil, err
	}
	rd := withDefaults(id, spec)
	rd.secretNS, rd.cluster, rd.ready, rd.generation = secretNS, ref.Kind == KindClusterDestination, ready, generation
	rd.expose = expose
	return rd, nil
}

// Exposure is what the namespaces that send to cd may read of its responses (spec.response.expose), or nil
// for the whole response: a ClusterDestination stored before the field existed, which keeps what its tenants
// saw until its admin sets it (the API server requires it of a new one).
func Exposure(cd *actionsv1alpha1.ClusterDestination) *redact.Exposure {
	rp := cd.Spec.Response
	if rp == nil || rp.Expose == nil {
		return nil
	}
	return &redact.Exposure{Headers: rp.Expose.Headers, Body: rp.Expose.Body}
}

// withDefaults is spec resolved as destination id with every default applied (CONTRACT).
func withDefaults(id string, spec *actionsv1alpha1.DestinationSpec) *Resolved {
	rd := &Resolved{ID: id, Spec: spec, Timeout: actionsv1alpha1.DefaultTimeout, KeyHeader: DefaultIdempotencyHdr}
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		rd.Timeout = spec.Timeout.Duration
	}
	if idem := spec.Idempotency; idem != nil {
		if idem.Header != "" {
			rd.KeyHeader = idem.Header
		}
		rd.KeySupported = idem.Supported
	}
	rd.Policy, rd.DeadlineDur = policy(spec.RetryPolicy)
	rd.Limits = limitsFor(spec)
	if c := spec.Concurrency; c != nil && c.MaxInFlight != nil {
		rd.MaxInFlight = int(*c.MaxInFlight)
	}
	rd.Retention, rd.TombstoneTTL = DefaultTTLAfterFinished, DefaultTombstoneTTL
	if ret := spec.Retention; ret != nil {
		if ret.TTLAfterFinished != nil {
			rd.Retention = ret.TTLAfterFinished.Duration
		}
		if ret.TombstoneTTL != nil {
			rd.TombstoneTTL = ret.TombstoneTTL.Duration
		}
	}
	return rd
}

// errDestinationNotReady marks a destination whose validator found it unusable (NotReady);
// destinationNotReady carries the validator's reason.
var errDestinationNotReady = errors.New("destination not ready")

type destinationNotReady struct {
	id, reason, message string
}

func (e *destinationNotReady) Error() string {
	return fmt.Sprintf("%s is not Ready (%s): %s; nothing is sent until it is fixed", e.id, e.reason, e.message)
}

func (e *destinationNotReady) Unwrap() error { return errDestinationNotReady }

// NotReady returns a *destinationNotReady when the destination's validator found, for its current generation,
// that the egress policy refuses its address (Ready=False, reason EgressDenied): then no attempt could leave,
// and the verdict changes only with the destination's spec, the manager's flags or (for a host name) the
// validator's periodic re-resolution, each of which updates the Destination and so wakes its actions.
// Other Ready=False reasons are not taken from the validator: a missing Secret may be created after the
// destination (GitOps applies in any order) and the validator does not watch Secrets, so the action checks
// those itself right before a send (LoadCredentials). No Ready condition yet is not judged either: the
// executor checks every dial.
func (rd *Resolved) NotReady() error {
	c := rd.ready
	if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != rd.generation ||
		c.Reason != actionsv1alpha1.ReasonEgressDenied {
		return nil
	}
	return &destinationNotReady{id: rd.ID, reason: c.Reason, message: c.Message}
}

// CheckReconciliation compiles rd's spec.reconciliation.applied and notApplied with compile (the manager's
// expression cache, as the destination's validator does), so that an action is held before anything is sent
// while its destination's post-check could not be evaluated: an expression refused at compile (too expensive, a
// matches pattern that is not a literal) makes the destination unusable (reason DestinationNotReady) until the
// destination is changed, which wakes its actions. nil without spec.reconciliation.
func (rd *Resolved) CheckReconciliation(compile func(src string) error) error {
	rc := rd.Spec.Reconciliation
	if rc == nil {
		return nil
	}
	for _, e := range []struct{ field, src string }{{"applied", rc.Applied}, {"notApplied", rc.NotApplied}} {
		if err := compile(e.src); err != nil {
			return &destinationNotReady{id: rd.ID, reason: actionsv1alpha1.ReasonDestinationNotReady,
				message: fmt.Sprintf("spec.reconciliation.%s: %v", e.field, err)}
		}
	}
	return nil
}

// LoadCredentials reads the Secrets that rd names (auth headers and TLS material) into rd. It is called
// only right before a request is sent: resolution alone never reads a Secret. A Destination reads Secrets
// only in its own namespace, with the rights r.Tenants gives it (a ServiceAccount of that namespace); a
// ClusterDestination only in the controller's, with the manager's.
func (r *Resolver) LoadCredentials(ctx context.Context, rd *Resolved) error {
	reader, as, err := r.Tenants.secretsOf(ctx, r.Secrets, rd.cluster, rd.secretNS, rd.Spec, rd.ID)
	if err != nil {
		return err
	}
	sr := secretReader{reader: reader, ctx: ctx, allowed: rd.secretNS, owner: rd.ID, as: as}
	var secrets []string
	if rd.AuthHeader, secrets, err = sr.authHeader(rd.Spec.Auth); err != nil {
		return err
	}
	if rd.TLS, err = sr.tlsOptions(rd.Spec.TLS); err != nil {
		return err
	}
	var more []string
	if rd.OAuth2, more, err = sr.oauth2(rd.Spec.Auth, rd.TLS); err != nil {
		return err
	}
	secrets = append(secrets, more...)
	if rd.Signer, more, err = sr.signer(rd.Spec.Signing); err != nil {
		return err
	}
	rd.Redactor = redact.New(append(secrets, more...)...).Exposing(rd.expose)
	rd.tokens, rd.clock = r.tokenCache, r.Clock
	return nil
}

// policy defaults a destination's retry policy; the deadline is returned as a duration.
func policy(p *actionsv1alpha1.RetryPolicy) (retry.Policy, time.Duration) {
	out := retry.Policy{
		MaxAttempts: DefaultMaxAttempts, InitialBackoff: DefaultInitialBackoff, MaxBackoff: DefaultMaxBackoff,
		Multiplier: DefaultMultiplier, Jitter: retry.JitterFull, RetryOnStatus: retry.DefaultRetryOnStatus(),
	}
	deadline := DefaultDeadline
	if p == nil {
		return out, deadline
	}
	if p.MaxAttempts != nil {
		out.MaxAttempts = *p.MaxAttempts
	}
	if p.InitialBackoff != nil {
		out.InitialBackoff = p.InitialBackoff.Duration
	}
	if p.MaxBackoff != nil {
		out.MaxBackoff = p.MaxBackoff.Duration
	}
	if p.BackoffMultiplier != "" {
		if m, err := strconv.ParseFloat(p.BackoffMultiplier, 64); err == nil && m >= 1 {
			out.Multiplier = m
		}
	}
	if p.Jitter != "" {
		out.Jitter = retry.Jitter(p.Jitter)
	}
	if p.Deadline != nil {
		deadline = p.Deadline.Duration
	}
	if len(p.RetryOnStatus) > 0 {
		out.RetryOnStatus = append([]int32(nil), p.RetryOnStatus...)
	}
	return out, deadline
}

// Tighten applies an action's retryPolicy over the destination's; a looser value is an error that says which.
func Tighten(dest retry.Policy, destDeadline time.Duration, p *actionsv1alpha1.RetryPolicy) (retry.Policy, time.Duration, error) {
	if p == nil {
		return dest, destDeadline, nil
	}
	out, deadline := dest, destDeadline
	var loose []string
	if p.MaxAttempts != nil {
		if *p.MaxAttempts > dest.MaxAttempts {
			loose = append(loose, fmt.Sprintf("maxAttempts %d > destination's %d", *p.MaxAttempts, dest.MaxAttempts))
		}
		out.MaxAttempts = *p.MaxAttempts
	}
	if p.InitialBackoff != nil {
		if p.InitialBackoff.Duration < dest.InitialBackoff {
			loose = append(loose, fmt.Sprintf("initialBackoff %s < destination's %s", p.InitialBackoff.Duration, dest.InitialBackoff))
		}
		out.InitialBackoff = p.InitialBackoff.Duration
	}
	if p.MaxBackoff != nil {
		if p.MaxBackoff.Duration < dest.MaxBackoff && p.MaxBackoff.Duration < out.InitialBackoff {
			loose = append(loose, fmt.Sprintf("maxBackoff %s < initialBackoff %s", p.MaxBackoff.Duration, out.InitialBackoff))
		}
		if p.MaxBackoff.Duration < dest.MaxBackoff {
			loose = append(loose, fmt.Sprintf("maxBackoff %s < destination's %s", p.MaxBackoff.Duration, dest.MaxBackoff))
		}
		out.MaxBackoff = p.MaxBackoff.Duration
	}
	if p.BackoffMultiplier != "" {
		m, err := strconv.ParseFloat(p.BackoffMultiplier, 64)
		if err != nil || m < dest.Multiplier {
			loose = append(loose, fmt.Sprintf("backoffMultiplier %s < destination's %g", p.BackoffMultiplier, dest.Multiplier))
		} else {
			out.Multiplier = m
		}
	}
	if p.Jitter != "" {
		out.Jitter = retry.Jitter(p.Jitter)
	}
	if p.Deadline != nil {
		if p.Deadline.Duration > destDeadline {
			loose = append(loose, fmt.Sprintf("deadline %s > destination's %s", p.Deadline.Duration, destDeadline))
		}
		deadline = p.Deadline.Duration
	}
	if len(p.RetryOnStatus) > 0 {
		loose = append(loose, looserStatuses(dest.RetryOnStatus, p.RetryOnStatus)...)
		out.RetryOnStatus = append([]int32(nil), p.RetryOnStatus...)
	}
	if len(loose) > 0 {
		return dest, destDeadline, fmt.Errorf("spec.retryPolicy may only tighten the destination's policy: %s", strings.Join(loose, "; "))
	}
	return out, deadline, nil
}

// looserStatuses names the statuses in want that the destination's retryOnStatus (have) does not retry.
func looserStatuses(have, want []int32) []string {
	allowed := map[int32]bool{}
	for _, c := range have {
		allowed[c] = true
	}
	var loose []string
	for _, c := range want {
		if !allowed[c] {
			loose = append(loose, fmt.Sprintf("retryOnStatus %d is not retried by the destination", c))
		}
	}
	return loose
}

func limitsFor(spec *actionsv1alpha1.DestinationSpec) limiter.Limits {
	var l limiter.Limits
	if rl := spec.RateLimit; rl != nil {
		l.RequestsPerSecond = rl.RequestsPerSecond
		if rl.Burst != nil {
			l.Burst = *rl.Burst
		}
	}
	if b := spec.RetryBudget; b != nil {
		// The budget's defaults (20%, 1/s, 10s) are the limiter's (limiter.DefaultRetryPercent and others).
		var window time.Duration
		if b.Window != nil {
			window = b.Window.Duration
		}
		l = l.WithRetryBudget(b.RetryPercent, b.MinRetriesPerSecond, window)
		if l.Window <= 0 {
			l.Window = limiter.DefaultWindow
		}
	}
	return l
}

// TakeShare divides dest's limits (rate, burst, retry-budget floor, maxInFlight) by the number of shards using
// it (r.Shards; docs/sharding.md), or returns how long to wait while this shard is not yet allowed a share.
// maxInFlight keeps a floor of 1 per shard.
func (r *Resolver) TakeShare(dest *Resolved, now time.Time) (time.Duration, bool) {
	shares, wait, ok := r.Shards.Share(dest.ID, now)
	if !ok {
		return wait, false
	}
	if shares > 1 {
		dest.Limits.Shares = shares
		m := dest.MaxInFlight
		if m <= 0 {
			m = dispatch.DefaultMaxInFlight
		}
		dest.MaxInFlight = max(1, m/shares)
	}
	return 0, true
}

// ShareRecheck caps the limiter's wait at the shard Lease duration while dest's limits are divided: the wait
// was computed at this shard's share, and when a shard leaves, the larger share is taken at the next ask
// instead of after the whole backlog was served at the smaller one.
func (r *Resolver) ShareRecheck(dest *Resolved, wait time.Duration) time.Duration {
	if dest.Limits.Shares > 1 {
		return min(wait, r.Shards.Recheck())
	}
	return wait
}

// secretReader reads Secret keys for one destination, refusing any namespace but the allowed one.
type secretReader struct {
	reader  client.Reader
	ctx     context.Context
	allowed string
	owner   string
	// as is the ServiceAccount (of namespace allowed) whose rights reader has; "" the manager's.
	as string
}

func (s secretReader) secret(name, namespace string) (*corev1.Secret, error) {
	if namespace != "" && namespace != s.allowed {
		return nil, fmt.Errorf("%w: %s names Secret %s/%s, but it may read Secrets only in namespace %q",
			errSecretNotAllowed, s.owner, namespace, name, s.allowed)
	}
	sec := &corev1.Secret{}
	err := s.reader.Get(s.ctx, types.NamespacedName{Namespace: s.allowed, Name: name}, sec)
	switch {
	case err == nil:
		return sec, nil
	case s.as != "" && apierrors.IsForbidden(err):
		return nil, fmt.Errorf("%w: ServiceAccount %s/%s may not get Secret %s/%s, which %s names (it reads its Secrets "+
			"as that ServiceAccount); grant it get on that Secret (a Role and RoleBinding in %s) or name a Secret it may "+
			"read; nothing is sent", errSecretNotAllowed, s.allowed, s.as, s.allowed, name, s.owner, s.allowed)
	default:
		return nil, fmt.Errorf("reading Secret %s/%s for %s: %w", s.allowed, name, s.owner, err)
	}
}

func (s secretReader) key(sel *actionsv1alpha1.SecretKeySelector) ([]byte, error) {
	sec, err := s.secret(sel.Name, sel.Namespace)
	if err != nil {
		return nil, err
	}
	v, ok := sec.Data[sel.Key]
	if !ok {
		return nil, fmt.Errorf("secret %s/%s has no key %q (needed by %s)", s.allowed, sel.Name, sel.Key, s.owner)
	}
	return v, nil
}

// authHeader builds the auth headers and returns, with them, every Secret-derived value they carry (raw and
// trimmed Secret values, encoded forms and whole header values) for redaction. A value shorter than
// redact.MinSecretLength is refused (errShortSecret): it could not be redacted safely.
func (s secretReader) authHeader(a *actionsv1alpha1.AuthConfig) (http.Header, []string, error) {
	h := http.Header{}
	if a == nil {
		return h, nil, nil
	}
	var secrets []string
	if a.BearerToken != nil {
		v, err := s.key(a.BearerToken)
		if err != nil {
			return nil, nil, err
		}
		t := strings.TrimSpace(string(v))
		if err := s.long(t, a.BearerToken.Name, a.BearerToken.Key); err != nil {
			return nil, nil, err
		}
		h.Set("Authorization", "Bearer "+t)
		secrets = append(secrets, string(v), t, h.Get("Authorization"))
	}
	if a.Basic != nil {
		sec, err := s.secret(a.Basic.Name, a.Basic.Namespace)
		if err != nil {
			return nil, nil, err
		}
		u, p := sec.Data[corev1.BasicAuthUsernameKey], sec.Data[corev1.BasicAuthPasswordKey]
		if u == nil || p == nil {
			return nil, nil, fmt.Errorf("secret %s/%s needs keys %q and %q for basic auth (%s)", s.allowed, a.Basic.Name,
				corev1.BasicAuthUsernameKey, corev1.BasicAuthPasswordKey, s.owner)
		}
		// An empty password is allowed (some APIs send the key as the username); a short one is not.
		if len(p) > 0 {
			if err := s.long(string(p), a.Basic.Name, corev1.BasicAuthPasswordKey); err != nil {
				return nil, nil, err
			}
		}
		pair := string(u) + ":" + string(p)
		enc := base64.StdEncoding.EncodeToString([]byte(pair))
		h.Set("Authorization", "Basic "+enc)
		// A username shorter than redact.MinSecretLength is not redacted (redact.New ignores it): it is an identity.
		secrets = append(secrets, "Basic "+enc, enc, pair, string(p), string(u))
	}
	for _, hs := range a.Headers {
		v, err := s.key(&hs.ValueFrom)
		if err != nil {
			return nil, nil, err
		}
		t := strings.TrimSpace(string(v))
		if err := s.long(t, hs.ValueFrom.Name, hs.ValueFrom.Key); err != nil {
			return nil, nil, err
		}
		h.Set(hs.Name, t)
		secrets = append(secrets, string(v), t)
	}
	return h, secrets, nil
}

// oauth2 reads spec.auth.oauth2's client ID and secret (nil without oauth2) and returns, with them, the
// values to redact: the secret (raw and trimmed) and the client ID when it is long enough (an identity, but
// read from a Secret). The token endpoint gets the destination's TLS material (tlsOpts).
func (s secretReader) oauth2(a *actionsv1alpha1.AuthConfig, tlsOpts *httpexec.TLSOptions) (*httpexec.ClientCredentials, []string, error) {
	if a == nil || a.OAuth2 == nil {
		return nil, nil, nil
	}
	o := a.OAuth2
	id, err := s.key(&o.ClientID)
	if err != nil {
		return nil, nil, err
	}
	secret, err := s.key(&o.ClientSecret)
	if err != nil {
		return nil, nil, err
	}
	tid, tsecret := strings.TrimSpace(string(id)), strings.TrimSpace(string(secret))
	if tid == "" {
		return nil, nil, fmt.Errorf("key %q of Secret %s/%s (auth.oauth2.clientID of %s) is empty; put the OAuth2 client ID there",
			o.ClientID.Key, s.allowed, o.ClientID.Name, s.owner)
	}
	if err := s.long(tsecret, o.ClientSecret.Name, o.ClientSecret.Key); err != nil {
		return nil, nil, err
	}
	cc := &httpexec.ClientCredentials{TokenURL: o.TokenURL, ClientID: tid, ClientSecret: tsecret,
		Scopes: append([]string(nil), o.Scopes...), TLS: tlsOpts}
	if len(o.EndpointParams) > 0 || o.Audience != "" {
		cc.EndpointParams = url.Values{}
		for k, v := range o.EndpointParams {
			cc.EndpointParams.Set(k, v)
		}
		if o.Audience != "" {
			cc.EndpointParams.Set("audience", o.Audience)
		}
	}
	return cc, []string{string(secret), tsecret, string(id), tid}, nil
}

// signer reads spec.signing's key (nil without signing) and returns, with the signer, the values to redact.
func (s secretReader) signer(sc *actionsv1alpha1.SigningConfig) (httpexec.Signer, []string, error) {
	switch {
	case sc == nil:
		return nil, nil, nil
	case sc.StandardWebhooks != nil:
		sel := &sc.StandardWebhooks.SecretRef
		v, err := s.key(sel)
		if err != nil {
			return nil, nil, err
		}
		t := strings.TrimSpace(string(v))
		if err := s.long(t, sel.Name, sel.Key); err != nil {
			return nil, nil, err
		}
		sig, err := httpexec.NewStandardWebhooks(t)
		if err != nil {
			return nil, nil, fmt.Errorf("key %q of Secret %s/%s (signing.standardWebhooks.secretRef of %s): %w; put the "+
				"secret there as the Standard Webhooks tools give it, for example whsec_<base64>", sel.Key, s.allowed, sel.Name, s.owner, err)
		}
		return sig, []string{string(v), t, strings.TrimPrefix(t, "whsec_")}, nil
	case sc.HMAC != nil:
		h := sc.HMAC
		v, err := s.key(&h.SecretRef)
		if err != nil {
			return nil, nil, err
		}
		t := strings.TrimSpace(string(v))
		if err := s.long(t, h.SecretRef.Name, h.SecretRef.Key); err != nil {
			return nil, nil, err
		}
		sig, err := httpexec.NewHMAC(hmacOptions(h), []byte(t))
		if err != nil {
			return nil, nil, fmt.Errorf("signing.hmac of %s: %w", s.owner, err)
		}
		return sig, []string{string(v), t}, nil
	}
	return nil, nil, nil
}

// hmacOptions maps spec.signing.hmac to the signer's options: payload KeyTimestampBody sends the signing time in
// timestampHeader (DefaultHMACTimestampHeader when empty); Body, or no payload (a Destination stored before the
// field existed), signs the body only.
func hmacOptions(h *actionsv1alpha1.HMACSigning) httpexec.HMACOptions {
	o := httpexec.HMACOptions{Header: h.Header, Algorithm: string(h.Algorithm), Prefix: h.Prefix}
	if h.Payload == actionsv1alpha1.HMACPayloadKeyTimestampBody {
		o.TimestampHeader = h.TimestampHeader
		if o.TimestampHeader == "" {
			o.TimestampHeader = actionsv1alpha1.DefaultHMACTimestampHeader
		}
	}
	return o
}

// errShortSecret marks a Secret value too short to be redacted safely (redact.MinSecretLength).
var errShortSecret = errors.New("secret value too short")

// long refuses a Secret value shorter than redact.MinSecretLength; the message names the key, never the value.
func (s secretReader) long(v, name, key string) error {
	if len(v) >= redact.MinSecretLength {
		return nil
	}
	return fmt.Errorf("%w: key %q of Secret %s/%s (needed by %s) holds %d bytes; a value sent as a credential needs at "+
		"least %d bytes, because shorter ones cannot be redacted from responses safely. Use a longer credential, or put "+
		"a header that is not secret in the action's spec.request.headers", errShortSecret, key, s.allowed, name, s.owner,
		len(v), redact.MinSecretLength)
}

func (s secretReader) tlsOptions(t *actionsv1alpha1.TLSConfig) (*httpexec.TLSOptions, error) {
	if t == nil {
		return nil, nil
	}
	o := &httpexec.TLSOptions{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CABundle != nil {
		v, err := s.key(t.CABundle)
		if err != nil {
			return nil, err
		}
		o.CABundle = v
	}
	if t.ClientCertificate != nil {
		sec, err := s.secret(t.ClientCertificate.Name, t.ClientCertificate.Namespace)
		if err != nil {
			return nil, err
		}
		o.ClientCert, o.ClientKey = sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]
		if o.ClientCert == nil || o.ClientKey == nil {
			return nil, fmt.Errorf("secret %s/%s needs keys %q and %q for a client certificate (%s)", s.allowed,
				t.ClientCertificate.Name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, s.owner)
		}
	}
	return o, nil
}

// IdempotencyKey renders the destination's key format for an action (default "{namespace}/{name}").
func IdempotencyKey(spec *actionsv1alpha1.DestinationSpec, namespace, name string) string {
	format := DefaultKeyFormat
	if spec.Idempotency != nil && spec.Idempotency.KeyFormat != "" {
		format = spec.Idempotency.KeyFormat
	}
	return strings.NewReplacer("{namespace}", namespace, "{name}", name).Replace(format)
}

// LimiterReason maps a reason of package limiter to the API's condition reason (CONTRACT): the limiter's
// strings are its own, and what status shows is decided here, explicitly.
func LimiterReason(r limiter.Reason) string {
	switch r {
	case limiter.ReasonRetryBudgetExhausted:
		return actionsv1alpha1.ReasonRetryBudgetExhausted
	case limiter.ReasonRateLimited: // also limiter.ReasonPaused (a Retry-After pause of the destination)
		return actionsv1alpha1.ReasonRateLimited
	default:
		return actionsv1alpha1.ReasonRateLimited
	}
}

// CheckSecrets reads every Secret that spec names, as LoadCredentials would (with the rights tenants gives the
// destination: cluster for a ClusterDestination; nil tenants reads with manager), and returns the first problem
// (missing, outside secretNS, not readable by its ServiceAccount, too short, unusable); owner names the
// destination in messages. Used by the destination validator: the values are read and dropped.
func CheckSecrets(ctx context.Context, tenants *TenantSecrets, manager client.Reader, cluster bool,
	spec *actionsv1alpha1.DestinationSpec, secretNS, owner string) error {
	reader, as, err := tenants.secretsOf(ctx, manager, cluster, secretNS, spec, owner)
	if err != nil {
		return err
	}
	sr := secretReader{reader: reader, ctx: ctx, allowed: secretNS, owner: owner, as: as}
	if _, _, err := sr.authHeader(spec.Auth); err != nil {
		return err
	}
	tlsOpts, err := sr.tlsOptions(spec.TLS)
	if err != nil {
		return err
	}
	if _, _, err := sr.oauth2(spec.Auth, tlsOpts); err != nil {
		return err
	}
	_, _, err = sr.signer(spec.Signing)
	return err
}
