/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Effect is the side-effect class of a destination endpoint (the catalog's "effect").
// +kubebuilder:validation:Enum=Safe;Idempotent;Unsafe
type Effect string

const (
	// EffectSafe means the endpoint changes no state (RFC 9110 section 9.2.1).
	EffectSafe Effect = "Safe"
	// EffectIdempotent means repeating the request has the same effect as sending it once (RFC 9110 section 9.2.2).
	EffectIdempotent Effect = "Idempotent"
	// EffectUnsafe means a repeat may apply the effect again.
	EffectUnsafe Effect = "Unsafe"
)

// JitterMode selects how backoff delays are randomised.
// +kubebuilder:validation:Enum=Full;None
type JitterMode string

const (
	// JitterFull draws each delay uniformly from [0, backoff) ("full jitter"), never below Retry-After.
	JitterFull JitterMode = "Full"
	// JitterNone uses the capped exponential backoff as it is.
	JitterNone JitterMode = "None"
)

// SecretKeySelector names one key of a Secret.
type SecretKeySelector struct {
	// name is the Secret's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// namespace is the Secret's namespace. It may be omitted: a Destination reads Secrets only in its own namespace and a ClusterDestination only in the controller's namespace; any other value is refused (condition Ready=False, reason SecretNotAllowed) and nothing is sent.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`

	// key is the data key within the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// SecretReference names a whole Secret (for example a kubernetes.io/tls or kubernetes.io/basic-auth Secret).
type SecretReference struct {
	// name is the Secret's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// namespace is the Secret's namespace. It may be omitted: a Destination reads Secrets only in its own namespace and a ClusterDestination only in the controller's namespace; any other value is refused (condition Ready=False, reason SecretNotAllowed) and nothing is sent.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace,omitempty"`
}

// TLSConfig configures TLS towards the destination. Certificate verification is always on unless insecureSkipVerify is set explicitly.
type TLSConfig struct {
	// caBundle is a Secret key holding PEM CA certificates that verify the destination's certificate. When omitted the system roots are used.
	// +optional
	CABundle *SecretKeySelector `json:"caBundle,omitempty"`

	// clientCertificate is a kubernetes.io/tls Secret (keys tls.crt and tls.key) presented for mutual TLS.
	// +optional
	ClientCertificate *SecretReference `json:"clientCertificate,omitempty"`

	// serverName overrides the name used for SNI and certificate verification.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`

	// insecureSkipVerify disables certificate verification; it is meant for tests and defaults to false. A namespaced Destination with it set is not used (Ready=False, reason InsecureSkipVerifyNotAllowed; actions wait and nothing is sent) unless the manager runs with --insecure-skip-verify-allowed; a ClusterDestination may always set it.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// HeaderFromSecret is one request header whose value comes from a Secret.
type HeaderFromSecret struct {
	// name is the HTTP header name, for example X-Api-Key. It must be an RFC 9110 token (section 5.6.2), not a hop-by-hop or framing header and not Accept-Encoding (every request asks for the identity coding).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern="^[-0-9A-Za-z!#$%&'*+.^_`|~]+$"
	// +kubebuilder:validation:XValidation:rule=`!(self.lowerAscii() in ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'content-length', 'host']) && !self.lowerAscii().startsWith('proxy-')`,message="an auth header name may not be a hop-by-hop or framing header (Connection, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade, Expect, Content-Length, Host): the HTTP client sets those; choose another header name"
	// +kubebuilder:validation:XValidation:rule=`self.lowerAscii() != 'accept-encoding'`,message="an auth header name may not be Accept-Encoding: every request asks for the identity coding, because a compressed response would hide an echoed credential from redaction and its length would reveal the credential one guess at a time (BREACH); choose another header name"
	Name string `json:"name"`

	// valueFrom is the Secret key that holds the header value.
	// +required
	ValueFrom SecretKeySelector `json:"valueFrom"`
}

// AuthConfig adds credentials to every request. Secret values never appear in status, events, logs or metrics.
// +kubebuilder:validation:XValidation:rule="!has(self.oauth2) || (!has(self.bearerToken) && !has(self.basic))",message="auth.oauth2 sends its own Authorization header: remove auth.bearerToken and auth.basic, or remove auth.oauth2"
// +kubebuilder:validation:XValidation:rule="!has(self.oauth2) || !has(self.headers) || self.headers.all(h, h.name.lowerAscii() != 'authorization')",message="auth.oauth2 sends its own Authorization header: remove the auth.headers entry named Authorization, or remove auth.oauth2"
type AuthConfig struct {
	// bearerToken sends "Authorization: Bearer <value>" with the value of this Secret key.
	// +optional
	BearerToken *SecretKeySelector `json:"bearerToken,omitempty"`

	// basic sends HTTP basic authentication from a Secret with keys "username" and "password".
	// +optional
	Basic *SecretReference `json:"basic,omitempty"`

	// headers are arbitrary headers whose values come from Secrets.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Headers []HeaderFromSecret `json:"headers,omitempty"`

	// oauth2 fetches an access token with the OAuth 2.0 client credentials grant (RFC 6749 section 4.4) and sends it as "Authorization: Bearer <token>" (RFC 6750). It may not be combined with bearerToken, basic or an Authorization entry in headers; other headers may be added.
	// +optional
	OAuth2 *OAuth2ClientCredentials `json:"oauth2,omitempty"`
}

// OAuth2ClientCredentials is the OAuth 2.0 client credentials grant (RFC 6749 section 4.4). The controller keeps one token per destination and credential in memory only (never in status, events, logs or metrics; it is redacted like a Secret value) and fetches a new one before it expires. A token endpoint that cannot be reached or refuses the credential sends nothing to the destination: the attempt is recorded with errorClass TokenUnavailable and retried within the retry policy. A 401 from the destination drops the cached token, and the attempt is retried with a new one: a 401 says the request was not processed.
type OAuth2ClientCredentials struct {
	// tokenURL is the token endpoint, an absolute http or https URL without userinfo or fragment, for example https://auth.example/oauth2/token. Its address is checked against the manager's egress policy like the destination's, and the destination's tls settings (caBundle, clientCertificate, insecureSkipVerify; not serverName) apply to it.
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^[^:/?#]+://[^/?#]*@')`,message="auth.oauth2.tokenURL may not contain userinfo (user:password@): put the client's credentials in auth.oauth2.clientID and auth.oauth2.clientSecret"
	// +kubebuilder:validation:XValidation:rule=`!self.contains('#')`,message="auth.oauth2.tokenURL may not contain a fragment ('#'): remove it"
	TokenURL string `json:"tokenURL"`

	// clientID is the Secret key that holds the client identifier.
	// +required
	ClientID SecretKeySelector `json:"clientID"`

	// clientSecret is the Secret key that holds the client secret (at least 4 bytes after trimming spaces).
	// +required
	ClientSecret SecretKeySelector `json:"clientSecret"`

	// scopes are requested with the token (the "scope" parameter, space-separated, RFC 6749 section 3.3); none by default.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[!#-\[\]-~]+$`
	// +listType=atomic
	Scopes []string `json:"scopes,omitempty"`

	// audience is sent as the "audience" parameter of the token request, which some providers (Auth0, Okta and others) require to choose the API the token is for.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Audience string `json:"audience,omitempty"`

	// endpointParams are further parameters of the token request (form-encoded in its body), for example resource (RFC 8707). grant_type, scope, client_id, client_secret and audience are set by the other fields and may not appear here.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule=`self.all(k, !(k in ['grant_type', 'scope', 'client_id', 'client_secret', 'audience']))`,message="auth.oauth2.endpointParams may not set grant_type, scope, client_id, client_secret or audience: use auth.oauth2.scopes, auth.oauth2.clientID, auth.oauth2.clientSecret and auth.oauth2.audience"
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.size() >= 1 && k.size() <= 128)`,message="auth.oauth2.endpointParams names must be 1 to 128 characters long"
	// +kubebuilder:validation:XValidation:rule=`self.all(k, self[k].size() <= 2048)`,message="auth.oauth2.endpointParams values must be at most 2048 characters long"
	EndpointParams map[string]string `json:"endpointParams,omitempty"`
}

// SigningConfig signs every request (attempts and post-checks) with a key from a Secret, over the exact bytes sent. Each attempt is signed anew, with a fresh timestamp, over the same body. Exactly one kind may be given.
// +kubebuilder:validation:XValidation:rule="has(self.standardWebhooks) != has(self.hmac)",message="signing takes exactly one of signing.standardWebhooks or signing.hmac: remove one"
type SigningConfig struct {
	// standardWebhooks signs as the Standard Webhooks specification defines (https://www.standardwebhooks.com): headers webhook-id (the idempotency key), webhook-timestamp (Unix seconds) and webhook-signature ("v1," and the base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>").
	// +optional
	StandardWebhooks *StandardWebhooksSigning `json:"standardWebhooks,omitempty"`

	// hmac puts a hex HMAC into a header: by default (payload KeyTimestampBody) of "<idempotency key>.<timestamp>.<body>" with the timestamp in its own header, as Standard Webhooks binds id, time and body; with payload Body of the exact body bytes sent only, as GitHub (X-Hub-Signature-256: sha256=<hex>) does.
	// +optional
	HMAC *HMACSigning `json:"hmac,omitempty"`
}

// StandardWebhooksSigning is the Standard Webhooks signature scheme.
type StandardWebhooksSigning struct {
	// secretRef is the Secret key that holds the signing secret: base64 of the key bytes, optionally prefixed with "whsec_" (the form Standard Webhooks tools generate, for example whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw). Surrounding spaces are trimmed; a value that is not base64 keeps the destination from being used (Ready=False).
	// +required
	SecretRef SecretKeySelector `json:"secretRef"`
}

// HMACAlgorithm is the hash function of an HMAC signature (RFC 2104).
// +kubebuilder:validation:Enum=sha256;sha512
type HMACAlgorithm string

const (
	// HMACSHA256 is HMAC-SHA256 (FIPS 180-4).
	HMACSHA256 HMACAlgorithm = "sha256"
	// HMACSHA512 is HMAC-SHA512 (FIPS 180-4).
	HMACSHA512 HMACAlgorithm = "sha512"
)

// HMACPayload is what an HMAC signature covers.
// +kubebuilder:validation:Enum=KeyTimestampBody;Body
type HMACPayload string

const (
	// HMACPayloadKeyTimestampBody signs "<idempotency key>.<unix seconds>.<body>" (the key as sent in the idempotency header, the signing time as sent in the timestamp header, then the exact body bytes), the string Standard Webhooks signs. A signature read from one request verifies for no other key and no other time.
	HMACPayloadKeyTimestampBody HMACPayload = "KeyTimestampBody"
	// HMACPayloadBody signs the exact body bytes only (GitHub's X-Hub-Signature-256). Weaker: the same body gets the same signature under every key and at every time, so a receiver cannot tell a replay from the signature.
	HMACPayloadBody HMACPayload = "Body"
)

// DefaultHMACTimestampHeader is the header that carries the signing time of a KeyTimestampBody signature when signing.hmac.timestampHeader is empty.
const DefaultHMACTimestampHeader = "X-Signature-Timestamp"

// HMACSigning is an HMAC (RFC 2104) sent in a header, over the key, the time and the body (payload KeyTimestampBody) or over the body only (payload Body).
// A new signing.hmac must say what it signs (payload; the admission policy config/admission/hmac_payload_policy.yaml sets KeyTimestampBody when it is absent); one stored before the field existed keeps signing the body only (payload absent means Body) until payload is set, and payload cannot be removed again.
// +kubebuilder:validation:XValidation:rule="has(self.payload) || (oldSelf.hasValue() && !has(oldSelf.value().payload))",message="signing.hmac.payload must be set: KeyTimestampBody (signs the idempotency key, a timestamp and the body; recommended) or Body (the body only, weaker: see docs/auth.md)",optionalOldSelf=true
// +kubebuilder:validation:XValidation:rule="!has(self.payload) || self.payload != 'KeyTimestampBody' || (has(self.timestampHeader) ? self.timestampHeader : 'X-Signature-Timestamp').lowerAscii() != self.header.lowerAscii()",message="signing.hmac.timestampHeader (default X-Signature-Timestamp) may not be signing.hmac.header: choose two different headers"
type HMACSigning struct {
	// header is the request header that carries the signature, for example X-Hub-Signature-256. It must be an RFC 9110 token (section 5.6.2), not a hop-by-hop or framing header, not Authorization and not a webhook-* header.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern="^[-0-9A-Za-z!#$%&'*+.^_`|~]+$"
	// +kubebuilder:validation:XValidation:rule=`!(self.lowerAscii() in ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'content-length', 'host', 'authorization', 'content-type']) && !self.lowerAscii().startsWith('proxy-') && !self.lowerAscii().startsWith('webhook-')`,message="signing.hmac.header may not be a hop-by-hop or framing header, Authorization, Content-Type or a webhook-* header: choose a header of its own, such as X-Signature"
	Header string `json:"header"`

	// secretRef is the Secret key whose bytes (surrounding spaces trimmed, at least 4 bytes) are the HMAC key.
	// +required
	SecretRef SecretKeySelector `json:"secretRef"`

	// algorithm is the hash function: sha256 (the default) or sha512.
	// +optional
	// +kubebuilder:default=sha256
	Algorithm HMACAlgorithm `json:"algorithm,omitempty"`

	// prefix is put before the lower-case hex digest, for example "sha256=" as GitHub does; none by default.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[!-~]*$`
	Prefix string `json:"prefix,omitempty"`

	// payload is what the signature covers. KeyTimestampBody: the HMAC of "<idempotency key>.<timestamp>.<body>", where the key is the value of the idempotency header (idempotency.header, default Idempotency-Key), the timestamp the signing time in Unix seconds (decimal) as sent in timestampHeader, and the body the exact bytes sent (empty for a request without one). Body: the HMAC of the body bytes only; weaker, since the same body gets the same signature under every key and at every time. A new signing.hmac gets KeyTimestampBody from the admission policy config/admission/hmac_payload_policy.yaml (Kubernetes 1.36+) and is refused without one where the policy is not installed; absent (a Destination stored before the field existed) means Body.
	// +optional
	Payload HMACPayload `json:"payload,omitempty"`

	// timestampHeader is the request header that carries the signing time (Unix seconds, decimal) with payload KeyTimestampBody; X-Signature-Timestamp when empty. Not sent with payload Body. The same rules as for header apply, and it may not be header itself.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern="^[-0-9A-Za-z!#$%&'*+.^_`|~]+$"
	// +kubebuilder:validation:XValidation:rule=`!(self.lowerAscii() in ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'content-length', 'host', 'authorization', 'content-type']) && !self.lowerAscii().startsWith('proxy-') && !self.lowerAscii().startsWith('webhook-')`,message="signing.hmac.timestampHeader may not be a hop-by-hop or framing header, Authorization, Content-Type or a webhook-* header: choose a header of its own, such as X-Signature-Timestamp"
	TimestampHeader string `json:"timestampHeader,omitempty"`
}

// IdempotencyConfig says how the idempotency key is sent and whether the destination honours it.
type IdempotencyConfig struct {
	// header is the request header that carries the idempotency key, as in the IETF draft "The Idempotency-Key HTTP Header Field"; the default is Idempotency-Key. It must be an RFC 9110 token (section 5.6.2) and not a hop-by-hop or framing header.
	// +optional
	// +kubebuilder:default=Idempotency-Key
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern="^[-0-9A-Za-z!#$%&'*+.^_`|~]+$"
	// +kubebuilder:validation:XValidation:rule=`!(self.lowerAscii() in ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'content-length', 'host']) && !self.lowerAscii().startsWith('proxy-')`,message="idempotency.header may not be a hop-by-hop or framing header (Connection, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade, Expect, Content-Length, Host): the HTTP client sets those; choose another header name"
	Header string `json:"header,omitempty"`

	// supported states that the destination itself deduplicates on the key, so that re-sending after an uncertain outcome (a timeout, a reset connection, a 502) is safe and the controller does so. A 409 from such a destination means "still in progress".
	// +optional
	Supported bool `json:"supported,omitempty"`

	// keyFormat is the key sent downstream. {namespace} and {name} are replaced by the ExternalAction's namespace and name. Defaults to "{namespace}/{name}". It never contains the object's UID, so a re-created object presents the same key. On a ClusterDestination it must contain both {namespace} and {name}, the text before the first of the two may not contain '{', and that first placeholder must be followed by a character that cannot occur in it: after {namespace} anything but a-z, 0-9, '-' and '{' (such as '/', '.' or ':'), after {name} anything but a-z, 0-9, '-', '.' and '{' (such as '/' or ':'). Then no two actions of different namespaces send the same key.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	KeyFormat string `json:"keyFormat,omitempty"`

	// claim says when a status write records the attempt before it is sent (the claim that a stale cache or a second manager loses with a Conflict, so that it sends nothing). Always (the default): before every send. WhenUnsafe: not before the first attempt of an action whose repeat cannot make a second effect (the destination deduplicates on the key, idempotency.supported, or the effect is Safe or Idempotent, explicitly or from the method per RFC 9110 section 9.2): that action is created, sent and recorded with one status write, and has no phase while its first attempt is out. The first attempt goes without a claim only within 2 minutes of the action's creation (or the timeout plus the claim margin, when longer); after that, and for every retry, the attempt is claimed as with Always. A manager that stops between the send and its record, or two managers at once, may send that first attempt again, always with the same key. An action whose repeat is unsafe is always claimed.
	// +optional
	// +kubebuilder:validation:Enum=Always;WhenUnsafe
	Claim ClaimPolicy `json:"claim,omitempty"`
}

// ClaimPolicy says when an attempt is claimed in status before it is sent (idempotency.claim).
type ClaimPolicy string

const (
	// ClaimAlways claims every attempt before it is sent (the default).
	ClaimAlways ClaimPolicy = "Always"
	// ClaimWhenUnsafe skips the claim of a first attempt whose repeat is safe.
	ClaimWhenUnsafe ClaimPolicy = "WhenUnsafe"
)

// ReconciliationCheck is the post-check: a request the controller sends when an attempt's outcome is uncertain and repeating it is not safe, to ask the destination whether the effect happened. The request is sent without a body. Its answer is judged by two CEL expressions that see `response`, with `response.statusCode` (int), `response.headers` (a map from lower-case header names to values) and `response.body` (the parsed JSON, or the text).
type ReconciliationCheck struct {
	// method is the HTTP method of the post-check: GET (the default) or HEAD.
	// +optional
	// +kubebuilder:default=GET
	// +kubebuilder:validation:Enum=GET;HEAD
	Method string `json:"method,omitempty"`

	// path is appended to the destination's URL; {key}, {namespace} and {name} are replaced by the action's URL-escaped values. Before the query ('?') it may not contain '.' or '..' segments (literal or percent-encoded as %2e), %2F, %5C or a backslash, so that the request stays under the destination's base path. A post-check whose filled-in path would leave the base path is not sent and counts as inconclusive.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([^?#]*/)?(\\.|%2[eE]){1,2}([/?#]|$)')`,message="reconciliation.path may not contain a '.' or '..' segment, literal or percent-encoded (%2e): it would leave the destination's base URL; remove the dot segments"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^[^?#]*(%2[fF]|%5[cC]|\\\\)')`,message="reconciliation.path may not contain an encoded slash (%2F), a backslash or an encoded backslash (%5C) before the query: a server that decodes them sees another path; use plain '/' between segments"
	Path string `json:"path"`

	// applied is a CEL expression over the post-check's response: true means the action's effect is proven applied, and the action becomes Succeeded.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Applied string `json:"applied"`

	// notApplied is a CEL expression over the post-check's response: true means the effect is proven absent, and the attempt is retried as usual within the retry policy. When neither expression holds, the check is inconclusive and is asked again later, up to maxChecks times; then the action becomes OutcomeUnknown.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	NotApplied string `json:"notApplied"`

	// maxChecks is how many inconclusive post-checks are made for one uncertain attempt; the default is 5.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxChecks *int32 `json:"maxChecks,omitempty"`
}

// RetryPolicy bounds retries: attempts, backoff, the overall deadline and the status codes that are retried. On a Destination every unset field takes its default; on an ExternalAction every unset field is inherited from the destination, and a set field may only tighten it (fewer attempts, a shorter deadline, a longer or equal backoff, a subset of retryOnStatus).
type RetryPolicy struct {
	// maxAttempts is the total number of attempts, including the first; the default on a Destination is 5.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// initialBackoff is the delay after the first failed attempt, as a Go duration such as "1s". The default is 1s; the maximum is 24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) <= duration('24h')`,message="initialBackoff must be a Go duration from 0s to 24h (MaxBackoff), such as 1s"
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`

	// maxBackoff caps the exponential backoff before jitter, as a Go duration. The default is 5m; the maximum is 24h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) <= duration('24h')`,message="maxBackoff must be a Go duration from 0s to 24h (MaxBackoff), such as 5m"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`

	// backoffMultiplier is the growth factor between consecutive delays, as a decimal string of at least 1 such as "2" or "1.5"; the default is "2".
	// +optional
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]?(\.[0-9]{1,3})?$`
	BackoffMultiplier string `json:"backoffMultiplier,omitempty"`

	// jitter is Full (the default: each delay is drawn uniformly from zero to the backoff, but never shorter than a Retry-After) or None (the backoff as it is).
	// +optional
	Jitter JitterMode `json:"jitter,omitempty"`

	// deadline is the overall time budget, measured from the ExternalAction's creation, as a Go duration. The default is 1h; it must be greater than 0s and at most 720h (30 days). A retry that would start after it ends the action Exhausted at once.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) > duration('0s') && duration(self) <= duration('720h')`,message="deadline must be a Go duration greater than 0s and at most 720h (MaxDeadline), such as 1h"
	Deadline *metav1.Duration `json:"deadline,omitempty"`

	// retryOnStatus lists the response status codes that are retried; the default is 408, 425, 429, 500, 502, 503 and 504. 408, 425, 429 and 503 say that the request was not processed, so they are retried directly. Any other code in this list is retried directly only when repeating is safe (the destination deduplicates on the key, or its effect is Safe or Idempotent); otherwise it is an uncertain outcome, settled by the post-check or by a person.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	RetryOnStatus []int32 `json:"retryOnStatus,omitempty"`
}

// Concurrency bounds the requests in flight to a destination at once.
type Concurrency struct {
	// maxInFlight is the largest number of requests (attempts and post-checks) in flight to the destination at once, shared by every action that uses it in any namespace and served fairly across namespaces.
	// Defaults to 64; at most 1024, and never more than the manager's --max-in-flight. An action that would wait behind a full round of requests is claimed only when there is room, and shows reason ConcurrencyLimited once it has waited longer than the destination's timeout.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`
}

// RateLimit is a token bucket shared by every action that uses the destination, served fairly across namespaces.
type RateLimit struct {
	// requestsPerSecond is the sustained rate of requests (attempts, post-checks and dead-letter deliveries) sent to the destination.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	RequestsPerSecond int32 `json:"requestsPerSecond"`

	// burst is the bucket size; the default is requestsPerSecond.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Burst *int32 `json:"burst,omitempty"`
}

// RetryBudget limits retries to a fraction of recent first attempts plus a floor, as Finagle and Envoy do. First attempts never wait on the retry budget.
type RetryBudget struct {
	// retryPercent is the share of first attempts in the window that may be retried, in percent; the default is 20.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	RetryPercent *int32 `json:"retryPercent,omitempty"`

	// minRetriesPerSecond is the number of retries per second that are always allowed; the default is 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	MinRetriesPerSecond *int32 `json:"minRetriesPerSecond,omitempty"`

	// window is the sliding window over which first attempts are counted, as a Go duration. The default is 10s; it must be greater than 0s and at most 1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) > duration('0s') && duration(self) <= duration('1h')`,message="window must be a Go duration greater than 0s and at most 1h (MaxRetryBudgetWindow), such as 10s"
	Window *metav1.Duration `json:"window,omitempty"`
}

// Retention says how long finished actions and their tombstones are kept.
type Retention struct {
	// ttlAfterFinished is how long a finished ExternalAction object is kept after completedAt, as a Go duration. The default is 24h; the maximum is 2160h (90 days). OutcomeUnknown actions are never deleted before a person decides.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) <= duration('2160h')`,message="ttlAfterFinished must be a Go duration from 0s to 2160h (MaxTTLAfterFinished), such as 24h"
	TTLAfterFinished *metav1.Duration `json:"ttlAfterFinished,omitempty"`

	// tombstoneTTL is how long the key stays bound to its fingerprint and outcome after the object is gone (the replay horizon), as a Go duration. The default is 720h (30 days); the maximum is 9600h (400 days). After it, the same name is a new action.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) <= duration('9600h')`,message="tombstoneTTL must be a Go duration from 0s to 9600h (MaxTombstoneTTL), such as 720h"
	TombstoneTTL *metav1.Duration `json:"tombstoneTTL,omitempty"`
}

// DestinationSpec is an endpoint catalog entry: where actions are sent and under which rules.
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || !has(self.tls.caBundle) || self.url.startsWith('https://')",message="tls.caBundle needs an https:// url"
// +kubebuilder:validation:XValidation:rule="!has(self.signing) || !has(self.signing.hmac) || self.signing.hmac.header.lowerAscii() != ((has(self.idempotency) && has(self.idempotency.header)) ? self.idempotency.header.lowerAscii() : 'idempotency-key')",message="signing.hmac.header may not be the idempotency header (idempotency.header, default Idempotency-Key): the signature would replace the key; choose another header, such as X-Signature"
// +kubebuilder:validation:XValidation:rule="!has(self.signing) || !has(self.signing.hmac) || !has(self.signing.hmac.payload) || self.signing.hmac.payload != 'KeyTimestampBody' || (has(self.signing.hmac.timestampHeader) ? self.signing.hmac.timestampHeader : 'X-Signature-Timestamp').lowerAscii() != ((has(self.idempotency) && has(self.idempotency.header)) ? self.idempotency.header.lowerAscii() : 'idempotency-key')",message="signing.hmac.timestampHeader (default X-Signature-Timestamp) may not be the idempotency header (idempotency.header, default Idempotency-Key): the timestamp would replace the key; choose another header"
// +kubebuilder:validation:XValidation:rule="!has(self.signing) || !has(self.signing.standardWebhooks) || !has(self.idempotency) || !has(self.idempotency.header) || !(self.idempotency.header.lowerAscii() in ['webhook-timestamp', 'webhook-signature'])",message="idempotency.header may not be webhook-timestamp or webhook-signature with signing.standardWebhooks: those carry the signature (webhook-id already carries the key); choose another header"
type DestinationSpec struct {
	// url is the base URL (http or https); each action's request.path is appended to it. Its path may not contain '.' or '..' segments (literal or percent-encoded as %2e), a backslash or %5C: the base path is the boundary that request paths stay under. The controller checks the joined, normalized URL again before each send and refuses one that leaves the base path (reason PathOutsideBase).
	// +required
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^[^:/?#]+://[^/?#]*/([^?#]*/)?(\\.|%2[eE]){1,2}([/?#]|$)')`,message="url may not contain a '.' or '..' path segment, literal or percent-encoded (%2e): write the base path without dot segments"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^[^?#]*(\\\\|%5[cC])')`,message="url may not contain a backslash or an encoded backslash (%5C) before the query; use '/' between segments"
	URL string `json:"url"`

	// timeout is the time allowed for one attempt, as a Go duration. The default is 30s; it must be greater than 0s and at most 10m. A send still running after it is an uncertain outcome, never a failure.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches('^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) > duration('0s') && duration(self) <= duration('10m')`,message="timeout must be a Go duration greater than 0s and at most 10m (MaxTimeout), such as 30s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// tls configures certificate verification and client certificates.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`

	// auth adds credentials from Secrets.
	// +optional
	Auth *AuthConfig `json:"auth,omitempty"`

	// signing signs every request with a key from a Secret (Standard Webhooks or a plain HMAC header).
	// +optional
	Signing *SigningConfig `json:"signing,omitempty"`

	// serviceAccountName is the ServiceAccount of the Destination's namespace whose rights read the Secrets it names (auth, tls, signing), by impersonation: a Secret that ServiceAccount may not get is refused before anything is sent (reason SecretNotAllowed, the message naming the Secret and the ServiceAccount). The ServiceAccount must exist: one that does not is never impersonated, and the Destination is refused the same way (reason SecretNotAllowed) until it is created. When empty the manager's --default-service-account is used; without one the manager reads with its own rights, unless it runs with --require-service-account, which refuses the Destination. Not allowed on a ClusterDestination.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// idempotency says how the key is sent and whether the destination deduplicates on it.
	// +optional
	Idempotency *IdempotencyConfig `json:"idempotency,omitempty"`

	// effect is the side-effect class of the endpoint. When unset it follows the request method as RFC 9110 section 9.2 defines it: GET, HEAD, OPTIONS Safe; PUT, DELETE Idempotent; POST, PATCH Unsafe.
	// +optional
	Effect Effect `json:"effect,omitempty"`

	// reconciliation is the post-check that is asked when an outcome is uncertain and repeating is not safe.
	// +optional
	Reconciliation *ReconciliationCheck `json:"reconciliation,omitempty"`

	// retryPolicy bounds the retries of actions sent to this destination.
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`

	// rateLimit limits the requests sent to this destination; it is shared by every action that uses it, fairly across namespaces.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`

	// concurrency bounds the requests in flight to this destination, shared by every action that uses it.
	// +optional
	Concurrency *Concurrency `json:"concurrency,omitempty"`

	// retryBudget limits retries (of attempts and of dead-letter deliveries) relative to first attempts.
	// +optional
	RetryBudget *RetryBudget `json:"retryBudget,omitempty"`

	// retention says how long finished actions and their tombstones are kept.
	// +optional
	Retention *Retention `json:"retention,omitempty"`

	// deadLetter hands an action sent to this destination that ends in one of deadLetter.phases (by default Exhausted and Failed) on to another destination, the sink: the manager delivers one CloudEvents 1.0 record of the case to it. It never re-sends the action's request and never changes its phase.
	// +optional
	DeadLetter *DeadLetterSink `json:"deadLetter,omitempty"`

	// traceContext says whether each attempt carries the W3C Trace Context headers (traceparent, and tracestate when there is one) of its span to this destination: Propagate (the default) or None. They are sent only when there is a trace: the manager exports traces (the standard OTEL_EXPORTER_OTLP_* variables are set), or the action joins a pipeline's trace (annotation actions.actionledger.dev/traceparent). They are never derived from the idempotency key.
	// +optional
	TraceContext TraceContextMode `json:"traceContext,omitempty"`
}

// TraceContextMode says whether the W3C Trace Context headers go to a destination.
// +kubebuilder:validation:Enum=Propagate;None
type TraceContextMode string

const (
	// TraceContextPropagate sends traceparent (and tracestate) with each attempt when there is a trace.
	TraceContextPropagate TraceContextMode = "Propagate"
	// TraceContextNone never sends them.
	TraceContextNone TraceContextMode = "None"
)

// DeadLetterPhase is a terminal phase whose actions go to the dead-letter sink.
// +kubebuilder:validation:Enum=Exhausted;Failed;OutcomeUnknown
type DeadLetterPhase string

// CloudEventMode is the CloudEvents HTTP content mode of a dead-letter record.
// +kubebuilder:validation:Enum=Binary;Structured
type CloudEventMode string

const (
	// CloudEventBinary puts the attributes in ce-* headers and the record in the body (application/json).
	CloudEventBinary CloudEventMode = "Binary"
	// CloudEventStructured sends the whole event as one application/cloudevents+json body.
	CloudEventStructured CloudEventMode = "Structured"
)

// DeadLetterSink is where the actions of a destination go when they end without success: one CloudEvents 1.0 record per action (type dev.actionledger.externalaction.deadletter, id the key the sink's idempotency.keyFormat makes for the action followed by /dead-letter), sent by HTTP POST with that id as the sink's idempotency key, under the sink's rate limit and retry budget, and retried with the sink's own retry policy.
type DeadLetterSink struct {
	// destinationRef names the sink: a Destination in the action's namespace, or a ClusterDestination whose namespaceSelector admits the action's namespace (otherwise nothing is sent and status.deadLetter says why, reason NamespaceNotAllowed). The sink's url, timeout, tls, auth, signing, idempotency, effect, retryPolicy and limits apply to the delivery; its own deadLetter does not (a record is never dead-lettered again). On a ClusterDestination it must name a ClusterDestination.
	// +required
	DestinationRef DestinationReference `json:"destinationRef"`

	// phases are the terminal phases whose actions are delivered: any of Exhausted, Failed and OutcomeUnknown; the default is Exhausted and Failed. OutcomeUnknown goes to the sink only when listed, since a person may still decide it.
	// +optional
	// +kubebuilder:validation:MaxItems=3
	// +listType=set
	Phases []DeadLetterPhase `json:"phases,omitempty"`

	// path is appended to the sink's url, with the same rules as an action's request.path; the default is "/".
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^/[^\s]*$`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([^?#]*/)?(\\.|%2[eE]){1,2}([/?#]|$)')`,message="deadLetter.path may not contain a '.' or '..' segment, literal or percent-encoded (%2e): it would leave the sink's base URL; remove the dot segments"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^[^?#]*(%2[fF]|%5[cC]|\\\\)')`,message="deadLetter.path may not contain an encoded slash (%2F), a backslash or an encoded backslash (%5C) before the query; use plain '/' between segments"
	Path string `json:"path,omitempty"`

	// mode is the CloudEvents HTTP content mode: Binary (the default: attributes in ce-* headers, the record as an application/json body) or Structured (the whole event as an application/cloudevents+json body).
	// +optional
	Mode CloudEventMode `json:"mode,omitempty"`
}

// DestinationStatus is the observed state of a Destination.
type DestinationStatus struct {
	// observedGeneration is the metadata.generation that the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions holds Ready, which is True when the destination can be used: its Secrets exist and are allowed, its expressions compile and its address is allowed by the egress policy.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=xdest,categories=actionledger
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="EFFECT",type=string,JSONPath=`.spec.effect`
// +kubebuilder:printcolumn:name="DEDUP",type=boolean,JSONPath=`.spec.idempotency.supported`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`

// Destination is a namespaced endpoint catalog entry that ExternalActions in the same namespace send to.
type Destination struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the endpoint and its rules.
	// +required
	Spec DestinationSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status DestinationStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DestinationList contains a list of Destination.
type DestinationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Destination `json:"items"`
}

// ClusterResponsePolicy is what a ClusterDestination lets its tenants read of the responses it gets.
type ClusterResponsePolicy struct {
	// expose lists the parts of each response (to an attempt, a post-check or a dead-letter delivery) that the sending namespace may read: its status (status.response, status.lastError, conditions and Events), spec.successWhen, spec.outputs and the dead-letter record all see the status code and these parts only, after the destination's Secret values are redacted. An empty expose ({}) shows the status code alone, and it is what a new ClusterDestination gets when expose is not written (from the admission policy config/admission/response_expose_policy.yaml, Kubernetes 1.36+; without the policy a new ClusterDestination without expose is refused). A ClusterDestination stored before the field existed has none and shows its tenants the whole response, as before, until expose is set; once set it cannot be removed. The Retry-After header is read by the manager whatever expose says (it schedules the next attempt, whose time is in status anyway), and reconciliation.applied and notApplied, written on the ClusterDestination by its admin, see the whole response.
	// +optional
	Expose *ResponseExposure `json:"expose,omitempty"`
}

// ResponseExposure names the response headers and the parts of a JSON response body that tenants may read.
type ResponseExposure struct {
	// headers are the response header names whose values tenants may read, compared case-insensitively; each must be an RFC 9110 token (section 5.6.2). Headers that carry a session or a credential the destination issued for the platform's credentials may not be listed: Set-Cookie, Set-Cookie2, Cookie, Authorization, Proxy-Authorization, Authentication-Info and Proxy-Authentication-Info. status.response.headers keeps only Location, Content-Type, Idempotent-Replayed and Retry-After of them; successWhen and outputs see all of them.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern="^[-0-9A-Za-z!#$%&'*+.^_`|~]+$"
	// +kubebuilder:validation:XValidation:rule=`self.all(h, !(h.lowerAscii() in ['set-cookie', 'set-cookie2', 'cookie', 'authorization', 'proxy-authorization', 'authentication-info', 'proxy-authentication-info']))`,message="response.expose.headers may not name Set-Cookie, Set-Cookie2, Cookie, Authorization, Proxy-Authorization, Authentication-Info or Proxy-Authentication-Info: they carry a session or credential the destination issued for the platform's credentials, with which a tenant could act outside this ClusterDestination's base path, limits and namespaceSelector; remove the name"
	// +listType=set
	Headers []string `json:"headers,omitempty"`

	// body lists JSON Pointers (RFC 6901) into the response body, such as /id or /items/0/status: tenants see a JSON body made of the values at these pointers, at their places (an object keeps only the exposed members; an array keeps the exposed elements at their indices, with null before them), and nothing else of it. "" is the whole body, whatever its content type. A body that is not one whole JSON value (not JSON, or cut by the manager's size limit), or in which no pointer is found, is shown to tenants as empty. With the whole body exposed, status.response.bodySHA256 is kept too; otherwise it is left out (a hash of a body with few possible values would tell it).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^(/([^~]|~[01])*)*$`
	// +listType=set
	Body []string `json:"body,omitempty"`
}

// ClusterDestinationSpec is a DestinationSpec plus the namespaces allowed to use it and what they may read of its responses.
// The response.expose rule is a transition rule (optionalOldSelf), as the keyFormat rule: a ClusterDestination stored before response.expose existed keeps working, and may be edited, without it (its tenants keep seeing the whole response); a new ClusterDestination must have it (the admission policy config/admission/response_expose_policy.yaml writes {} when it is absent), and once set it cannot be removed.
// +kubebuilder:validation:XValidation:rule=`(has(self.response) && has(self.response.expose)) || (oldSelf.hasValue() && !(has(oldSelf.value().response) && has(oldSelf.value().response.expose)))`,optionalOldSelf=true,fieldPath=".response",message="a ClusterDestination must say what its tenants may read of its responses: set response.expose, for example {} (the status code only) or {headers: [X-Request-Id], body: [/id]}; the admission policy config/admission/response_expose_policy.yaml sets {} when it is installed (see docs/security.md); once set, response.expose cannot be removed"
// The keyFormat rule is a transition rule (optionalOldSelf): a stored ClusterDestination whose keyFormat was accepted by an earlier, looser rule keeps working, and may be edited, as long as the keyFormat itself is left unchanged; a new or changed keyFormat must satisfy the rule.
// +kubebuilder:validation:XValidation:rule=`(has(self.idempotency) && has(self.idempotency.keyFormat) && self.idempotency.keyFormat.size() > 0 ? (self.idempotency.keyFormat.matches('^[^{]*[{]namespace[}][^-a-z0-9{]') && self.idempotency.keyFormat.contains('{name}')) || (self.idempotency.keyFormat.matches('^[^{]*[{]name[}][^-a-z0-9.{]') && self.idempotency.keyFormat.contains('{namespace}')) : true) || (oldSelf.hasValue() && has(oldSelf.value().idempotency) && has(oldSelf.value().idempotency.keyFormat) && has(self.idempotency) && has(self.idempotency.keyFormat) && oldSelf.value().idempotency.keyFormat == self.idempotency.keyFormat)`,optionalOldSelf=true,fieldPath=".idempotency.keyFormat",message="keyFormat of a ClusterDestination must contain {namespace} and {name}, the first of the two preceded by text without '{' and followed by a character that cannot occur in it (after {namespace} not a-z, 0-9, '-' or '{', such as '/', '.' or ':'; after {name} not a-z, 0-9, '-', '.' or '{', such as '/' or ':'), for example {namespace}/{name}: every namespace may use it, and otherwise two tenants' actions can send the same key ({namespace}-{name} gives team-a-pay-1 for both team/a-pay-1 and team-a/pay-1)"
// +kubebuilder:validation:XValidation:rule="!has(self.deadLetter) || self.deadLetter.destinationRef.kind == 'ClusterDestination'",message="deadLetter.destinationRef of a ClusterDestination must name a ClusterDestination (kind: ClusterDestination): a Destination would be looked up in each action's namespace, where its tenant controls it"
// +kubebuilder:validation:XValidation:rule="!has(self.serviceAccountName)",message="serviceAccountName is for namespaced Destinations: a ClusterDestination reads its Secrets in the controller's namespace with the manager's rights; remove serviceAccountName"
type ClusterDestinationSpec struct {
	DestinationSpec `json:",inline"`

	// response says what the tenants' actions may read of this ClusterDestination's responses.
	// +optional
	Response *ClusterResponsePolicy `json:"response,omitempty"`

	// namespaceSelector selects, by their labels, the namespaces whose ExternalActions may use this ClusterDestination. When omitted every namespace may use it; an empty selector ({}) also matches every namespace. An action in a namespace that does not match gets nothing sent and waits in phase Pending with reason NamespaceNotAllowed; it proceeds when the namespace's labels change to match.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=xcdest,categories=actionledger
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="EFFECT",type=string,JSONPath=`.spec.effect`
// +kubebuilder:printcolumn:name="DEDUP",type=boolean,JSONPath=`.spec.idempotency.supported`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterDestination is a cluster-scoped, admin-owned endpoint catalog entry with the same spec as Destination plus namespaceSelector. Its Secrets are read only from the controller's namespace. Every namespace may send to it, so its idempotency.keyFormat must name both the namespace and the action, separated so that the key can be read back: otherwise two tenants' actions would send the same key to a deduplicating destination (team/a-pay-1 and team-a/pay-1 under {namespace}-{name}), and the second would get the first one's outcome.
type ClusterDestination struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the endpoint, its rules and the namespaces that may use it.
	// +required
	Spec ClusterDestinationSpec `json:"spec"`

	// status is the observed state.
	// +optional
	Status DestinationStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterDestinationList contains a list of ClusterDestination.
type ClusterDestinationList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterDestination `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &Destination{}, &DestinationList{}, &ClusterDestination{}, &ClusterDestinationList{})
		return nil
	})
}
