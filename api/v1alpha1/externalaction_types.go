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
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DestinationReference names the Destination (same namespace) or ClusterDestination an action is sent to.
type DestinationReference struct {
	// kind is Destination (default) or ClusterDestination.
	// +optional
	// +kubebuilder:default=Destination
	// +kubebuilder:validation:Enum=Destination;ClusterDestination
	Kind string `json:"kind,omitempty"`

	// name is the name of the Destination or ClusterDestination.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// A named type lets the schema bound each header value, which keeps the cost of the CEL rules below within the
// API server's budget.

// HeaderValue is the value of one request header: at most 8192 bytes of UTF-8, without control characters other than horizontal tab (RFC 9110 section 5.5), so that it cannot split the request or end its header section.
// +kubebuilder:validation:MaxLength=8192
// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 8192",message="header values are at most 8192 bytes (8 KiB); shorten the value or send the data in the body"
// +kubebuilder:validation:XValidation:rule=`!self.matches('[\\x00-\\x08\\x0a-\\x1f\\x7f]')`,message="header values may not contain CR, LF, NUL or other control characters (a tab is allowed): they would split or corrupt the request; remove them"
type HeaderValue string

// ActionRequest is the HTTP request an action sends, rebuilt identically for every attempt.
type ActionRequest struct {
	// method is the HTTP method: GET, HEAD, OPTIONS, POST (the default), PUT, PATCH or DELETE.
	// +optional
	// +kubebuilder:default=POST
	// +kubebuilder:validation:Enum=GET;HEAD;OPTIONS;POST;PUT;PATCH;DELETE
	Method string `json:"method,omitempty"`

	// path is appended to the destination's URL and may carry a query string; the default is "/". Before the query ('?') it may not contain '.' or '..' segments (literal or percent-encoded as %2e), %2F, %5C or a backslash, so that the request stays under the destination's base path. The controller checks the joined, normalized URL again before sending: a path that would leave the base path ends the action Failed with reason PathOutsideBase, and nothing is sent.
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^/[^\s]*$`
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^([^?#]*/)?(\\.|%2[eE]){1,2}([/?#]|$)')`,message="request.path may not contain a '.' or '..' segment, literal or percent-encoded (%2e): it would leave the destination's base URL; remove the dot segments"
	// +kubebuilder:validation:XValidation:rule=`!self.matches('^[^?#]*(%2[fF]|%5[cC]|\\\\)')`,message="request.path may not contain an encoded slash (%2F), a backslash or an encoded backslash (%5C) before the query: a server that decodes them sees another path; use plain '/' between segments"
	Path string `json:"path,omitempty"`

	// headers are request headers that are not secret, at most 32; credentials belong in the destination's auth, which reads them from Secrets. Names are RFC 9110 tokens (section 5.6.2) of at most 256 characters; they are case-insensitive and each may appear once. Values are at most 8192 bytes, without control characters other than tab (RFC 9110 section 5.5). Authorization, the idempotency header, Accept-Encoding (every request asks for the identity coding, so that a response is not compressed), the hop-by-hop and framing headers (Connection, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade, Expect, Content-Length, Host; RFC 9110 section 7.6.1) and the routing-override and forwarding headers that proxies and frameworks route or authorize by (Forwarded, X-Forwarded-*, X-Original-*, X-Rewrite-URL, X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, X-Real-IP, X-Host, X-Envoy-Original-Path) cannot be set here.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.size() <= 256 && k.matches('^[-!#$%&\'*+.^_|~0-9A-Za-z\\x60]+$'))`,message="header names must be RFC 9110 tokens of at most 256 characters (letters, digits, a backquote or one of !#$%&'*+-.^_|~; no spaces, colons or control characters); rename the header"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k.lowerAscii() in ['authorization', 'idempotency-key']))",message="headers may not set Authorization or Idempotency-Key: credentials belong in the destination's auth (from a Secret) and the key is set from the destination's idempotency settings; remove the header"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k.lowerAscii() in ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'content-length', 'host']) && !k.lowerAscii().startsWith('proxy-'))",message="headers may not set hop-by-hop or framing headers (Connection, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade, Expect, Content-Length, Host): the HTTP client derives them from the request; remove the header"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.lowerAscii() != 'accept-encoding')",message="headers may not set Accept-Encoding: every request asks for the identity coding, because a compressed response would hide an echoed credential from redaction and its length would reveal the credential one guess at a time (BREACH); remove the header"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k.lowerAscii() in ['forwarded', 'x-rewrite-url', 'x-http-method-override', 'x-http-method', 'x-method-override', 'x-real-ip', 'x-host', 'x-envoy-original-path']) && !k.lowerAscii().startsWith('x-forwarded-') && !k.lowerAscii().startsWith('x-original-'))",message="headers may not set routing-override or forwarding headers (Forwarded, X-Forwarded-*, X-Original-*, X-Rewrite-URL, X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override, X-Real-IP, X-Host, X-Envoy-Original-Path): proxies and frameworks in front of a destination route or authorize by them, so they could move the request out of the destination's base path, change its method or claim another client, with the destination's credentials; remove the header"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self.all(j, j == k || j.lowerAscii() != k.lowerAscii()))",message="header names are case-insensitive and each may appear once; remove the entry that differs only in case"
	Headers map[string]HeaderValue `json:"headers,omitempty"`

	// body is any JSON value. It is sent as RFC 8785 canonical JSON with Content-Type application/json, unless headers set another Content-Type. Its serialized size is at most 64 KiB: a larger body ends the action Failed with reason InvalidSpec before anything is sent.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	Body *apiextensionsv1.JSON `json:"body,omitempty"`
}

// OutputExpression is a CEL expression over the response that gives one output value: a string as it is, a number or boolean in its JSON form, and a list or map as JSON.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=4096
type OutputExpression string

// ActionOutputs writes values taken from the response of a Succeeded action into a Secret or ConfigMap of the action's namespace, for the next step of a pipeline.
// +kubebuilder:validation:XValidation:rule="has(self.secretName) != has(self.configMapName)",message="spec.outputs names exactly one target: set either secretName or configMapName, not both and not neither"
type ActionOutputs struct {
	// secretName is the Secret the values are written to, in the action's namespace: a DNS-1123 subdomain of at most 253 characters. The controller creates it; an existing Secret that this action did not create is never changed (reason OutputConflict).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="spec.outputs.secretName must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit; rename the target"
	SecretName string `json:"secretName,omitempty"`

	// configMapName is the ConfigMap the values are written to, in the action's namespace: a DNS-1123 subdomain of at most 253 characters. Use a ConfigMap only for values that are not secret. The controller creates it; an existing ConfigMap that this action did not create is never changed (reason OutputConflict).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="spec.outputs.configMapName must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit; rename the target"
	ConfigMapName string `json:"configMapName,omitempty"`

	// values maps each data key of the target (1 to 32 keys; letters, digits, '-', '_' and '.', at most 253 characters, not '.' or '..' or starting with '..', as Secret and ConfigMap keys must be) to a CEL expression over `response`, with the same variables as successWhen: `response.statusCode`, `response.headers` and `response.body`. Example: {"orderID": "response.body.id", "location": "response.headers['location']"}. The expressions see the whole response body up to 256 KiB, with the destination's Secret values replaced by "[REDACTED]". An expression that fails (for example a field missing from the body) leaves the target unwritten with reason OutputExpressionFailed; nothing is sent again.
	// +required
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 253 && k.matches('^[-._a-zA-Z0-9]+$') && k != '.' && !k.startsWith('..'))",message="spec.outputs.values keys must be valid Secret and ConfigMap data keys: letters, digits, '-', '_' and '.', at most 253 characters, and not '.' or '..' or starting with '..'; rename the key"
	Values map[string]OutputExpression `json:"values"`

	// retain keeps the target when the action is deleted or collected. By default (false) the target has the action as its controller owner (ownerReference), so Kubernetes garbage collection deletes it with the action after ttlSecondsAfterFinished; with true it has no ownerReference and stays until someone deletes it.
	// +optional
	Retain bool `json:"retain,omitempty"`
}

// ExternalActionSpec declares one business action. The object's namespace/name is the idempotency key; destinationRef, request and successWhen form its fingerprint and cannot change.
// +kubebuilder:validation:XValidation:rule="has(self.successWhen) == has(oldSelf.successWhen)",message="spec.successWhen is immutable: it is part of the action's fingerprint. The name is the idempotency key; to perform a different action, create a new ExternalAction with a new name"
// +kubebuilder:validation:XValidation:rule="has(self.subject) == has(oldSelf.subject)",message="spec.subject is immutable: it decides which actions wait for each other. To act on another subject, create a new ExternalAction with a new name"
// +kubebuilder:validation:XValidation:rule="has(self.deadLetter) == has(oldSelf.deadLetter)",message="spec.deadLetter is immutable: it decides where the action's record goes once. To use another sink, create a new ExternalAction with a new name"
// +kubebuilder:validation:XValidation:rule="has(self.outputs) == has(oldSelf.outputs)",message="spec.outputs is immutable: the outputs are decided by the response the action records once. To write other outputs, create a new ExternalAction with a new name"
type ExternalActionSpec struct {
	// destinationRef names the Destination or ClusterDestination the action is sent to. It is immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.destinationRef is immutable: it is part of the action's fingerprint. The name is the idempotency key; to perform a different action, create a new ExternalAction with a new name"
	DestinationRef DestinationReference `json:"destinationRef"`

	// request is the HTTP request that every attempt sends, rebuilt identically each time. It is immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.request is immutable: it is part of the action's fingerprint. The name is the idempotency key; to perform a different action, create a new ExternalAction with a new name"
	Request ActionRequest `json:"request"`

	// successWhen is a CEL expression that decides whether the response is a success; without it, any 2xx status is. It sees `response`, with `response.statusCode` (int), `response.headers` (a map from lower-case header names to values) and `response.body` (the parsed JSON, or the text when the body is not JSON). Example: response.statusCode == 201 && response.body.status == "created". It is immutable.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.successWhen is immutable: it is part of the action's fingerprint. The name is the idempotency key; to perform a different action, create a new ExternalAction with a new name"
	SuccessWhen string `json:"successWhen,omitempty"`

	// retryPolicy overrides parts of the destination's retry policy for this action. It may only tighten it: a looser value ends the action Failed with reason InvalidSpec, and nothing is sent.
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`

	// subject names the business object the action operates on, for example order/19; it is optional, at most 253 characters, immutable, and not part of the fingerprint. Actions of one namespace that share a subject run one at a time, in creation order (creationTimestamp, then name): while another action holds the subject, this one sends nothing and stays Pending with reason WaitingForSubject. While the holder's outcome is unknown (phase OutcomeUnknown), the waiting action is Stalled with reason SubjectOutcomeUnknown until a person decides the holder with the actions.actionledger.dev/resolve annotation or deletes it. The hold is a coordination.k8s.io Lease named xa-subject- followed by 20 hex digits of the SHA-256 of the subject, in the action's namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.subject is immutable: it decides which actions wait for each other. To act on another subject, create a new ExternalAction with a new name"
	Subject string `json:"subject,omitempty"`

	// outputs writes values taken from the response into a Secret or ConfigMap of the action's namespace once the action Succeeded, and never from another outcome. It is optional, immutable and not part of the fingerprint. The values are kept nowhere else (not in status, events or logs): a target deleted later is not re-created (condition OutputsReady False, reason OutputMissing), and an action replayed from a tombstone has no response to take them from (reason OutputsNotAvailable). Ready is True only once the target is written.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.outputs is immutable: the outputs are decided by the response the action records once. To write other outputs, create a new ExternalAction with a new name"
	Outputs *ActionOutputs `json:"outputs,omitempty"`

	// deadLetter overrides the destination's spec.deadLetter for this action: where its record goes when it ends in one of the sink's phases (a Destination of this namespace, or a ClusterDestination whose namespaceSelector admits it). It is optional, immutable and not part of the fingerprint.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.deadLetter is immutable: it decides where the action's record goes once. To use another sink, create a new ExternalAction with a new name"
	DeadLetter *DeadLetterSink `json:"deadLetter,omitempty"`

	// ttlSecondsAfterFinished overrides the destination's retention.ttlAfterFinished for this action: how many seconds the finished object is kept, from 0 to 7776000 (90 days).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=7776000
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// Phase is the lifecycle position of an ExternalAction.
// +kubebuilder:validation:Enum=Pending;InProgress;Succeeded;Failed;OutcomeUnknown;Exhausted;Conflict
type Phase string

const (
	// PhasePending: accepted, nothing sent yet.
	PhasePending Phase = "Pending"
	// PhaseInProgress: an attempt is open or another is scheduled.
	PhaseInProgress Phase = "InProgress"
	// PhaseSucceeded: successWhen held; the response is the outcome.
	PhaseSucceeded Phase = "Succeeded"
	// PhaseFailed: a business rejection (not retryable) or an invalid spec; the response, if any, is the outcome.
	PhaseFailed Phase = "Failed"
	// PhaseOutcomeUnknown: a send may have been applied and nothing can prove it either way; waits for a person.
	PhaseOutcomeUnknown Phase = "OutcomeUnknown"
	// PhaseExhausted: attempts, retry budget or deadline ran out (the dead-letter disposition).
	PhaseExhausted Phase = "Exhausted"
	// PhaseConflict: the key is already bound to a different fingerprint (live object or tombstone).
	PhaseConflict Phase = "Conflict"
)

// Terminal reports whether no further attempt will be made without a person's decision.
func (p Phase) Terminal() bool {
	switch p {
	case PhaseSucceeded, PhaseFailed, PhaseOutcomeUnknown, PhaseExhausted, PhaseConflict:
		return true
	}
	return false
}

// AttemptClaim is an open attempt. The controller writes it before the request is sent and clears it when the outcome is recorded.
type AttemptClaim struct {
	// attempt is the attempt number this claim covers (1-based).
	Attempt int32 `json:"attempt"`
	// holder identifies the manager process that sent it (pod or host name plus a per-process nonce).
	// +kubebuilder:validation:MaxLength=253
	Holder string `json:"holder"`
	// startedAt is when the claim was written (RFC 3339).
	StartedAt metav1.Time `json:"startedAt"`
	// expiresAt is when the claim expires: the attempt's start plus the destination's timeout plus a margin. Until then no other manager touches the attempt; after it, an attempt without a recorded outcome is uncertain and is settled by the rules for uncertain outcomes (re-sent only when repeating is safe, else the post-check, else OutcomeUnknown).
	ExpiresAt metav1.Time `json:"expiresAt"`
	// postChecks counts the post-check requests made for this uncertain attempt.
	// +optional
	PostChecks int32 `json:"postChecks,omitempty"`
	// verdict is set when the attempt's response arrived and is recorded in status.response, but the evaluation of spec.successWhen on it did not finish (its time limit, a wait for an evaluation slot, or a shutdown). No verdict is drawn from an evaluation that did not finish: the attempt stays open, nothing is sent again, and the recorded response is judged again at expiresAt (reason VerdictPending). Only on status.claim, never on status.deadLetter.claim.
	// +optional
	Verdict *PendingVerdict `json:"verdict,omitempty"`
}

// MaxPendingVerdictHeaderBytes bounds status.claim.verdict.headers: names and values together, in bytes. A
// response whose headers, as the expression sees them, come to more is not kept for a later evaluation: an
// evaluation of it that does not finish at once waits for a person (VerdictUnavailable).
const MaxPendingVerdictHeaderBytes = 8 << 10

// PendingVerdict is an attempt's response whose verdict waits for an evaluation that finishes (DESIGN rule 12).
// With status.response (the status code and the body as the expression saw them) it is everything
// spec.successWhen needs, so the verdict survives a restart of the manager and never needs a second send.
type PendingVerdict struct {
	// receivedAt is when the response arrived (RFC 3339).
	ReceivedAt metav1.Time `json:"receivedAt"`
	// headers are the response headers as spec.successWhen sees them: names lower-cased, the values of one name joined with ", ", the destination's Secret values redacted; at most 8 KiB of names and values together.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Headers map[string]string `json:"headers,omitempty"`
	// inputSHA256 is the hex SHA-256 of the expression's input (status code, headers, body) as first seen. A later evaluation runs only on the same input, read back from status; any other (a status the API server made the manager trim) waits for a person instead (reason VerdictUnavailable).
	// +kubebuilder:validation:MaxLength=64
	InputSHA256 string `json:"inputSHA256"`
	// otherwise is the attempt's class should spec.successWhen not hold on this response: Rejected, Retryable, InProgress or Uncertain, decided by the status code and the retry policy as for any answer.
	// +kubebuilder:validation:Enum=Rejected;Retryable;InProgress;Uncertain
	Otherwise string `json:"otherwise"`
	// evaluations counts the evaluations of spec.successWhen on this response that did not finish.
	Evaluations int32 `json:"evaluations"`
	// reason is the kind of the last evaluation's failure to finish (for example "context deadline exceeded"), never a value of the response.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason,omitempty"`
}

// AttemptRecord is one finished attempt in status.attemptHistory.
type AttemptRecord struct {
	// number is the attempt number (1-based).
	Number int32 `json:"number"`
	// startedAt is when the attempt was claimed.
	StartedAt metav1.Time `json:"startedAt"`
	// finishedAt is when the attempt's outcome was known.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// result is the attempt's class: Success, Rejected, Retryable, InProgress, NotSent, Uncertain, Unjudged (a response whose spec.successWhen evaluation did not finish: status.claim.verdict), Replayed, Applied or NotApplied (decided by the post-check), or a person's decision.
	// +kubebuilder:validation:MaxLength=64
	Result string `json:"result"`
	// statusCode is the HTTP status code, when a response arrived.
	// +optional
	StatusCode int32 `json:"statusCode,omitempty"`
	// errorClass is the class of the transport failure, when no response arrived: for example DNS, Dial, TLSHandshake, Timeout, ConnectionReset, EgressDenied, TokenUnavailable (the OAuth2 token endpoint gave no token, so nothing was sent) or SigningFailed (the request could not be signed, so nothing was sent).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ErrorClass string `json:"errorClass,omitempty"`
	// retryAfter is the Retry-After header value the destination sent, with Secret values replaced by "[REDACTED]" and cut to 64 bytes on a UTF-8 boundary. The schedule uses the whole value.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RetryAfter string `json:"retryAfter,omitempty"`

	// traceID is the W3C trace id (32 lower-case hex digits) of the attempt's span, when the manager traces; `kubectl actionledger history` prints it. It is never derived from the idempotency key.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{32}$`
	TraceID string `json:"traceID,omitempty"`
}

// DeadLetterState is where the delivery of an action's dead-letter record stands.
// +kubebuilder:validation:Enum=Pending;Delivering;Delivered;Failed;Uncertain;Refused;GivenUp
type DeadLetterState string

const (
	// DeadLetterPending: the record is due and waits for its next delivery attempt (nextAttemptAt).
	DeadLetterPending DeadLetterState = "Pending"
	// DeadLetterDelivering: a delivery attempt is claimed (claim) and may be in flight.
	DeadLetterDelivering DeadLetterState = "Delivering"
	// DeadLetterDelivered: the sink accepted the record (a 2xx); final.
	DeadLetterDelivered DeadLetterState = "Delivered"
	// DeadLetterFailed: the sink refused the record (a 4xx not retried) or its retry policy ran out; final.
	DeadLetterFailed DeadLetterState = "Failed"
	// DeadLetterUncertain: a delivery may have reached a sink that does not deduplicate and nothing can prove it
	// either way, so it is not sent again (DESIGN rule 3); final.
	DeadLetterUncertain DeadLetterState = "Uncertain"
	// DeadLetterRefused: the sink cannot be used (missing, namespace not admitted, egress denied, Secrets not
	// allowed); nothing was sent. Not final: checked again, and the action kept, until the sink is usable or a
	// person gives the record up.
	DeadLetterRefused DeadLetterState = "Refused"
	// DeadLetterGivenUp: a person gave the record up (annotation actions.actionledger.dev/dead-letter=give-up)
	// before it was delivered; final.
	DeadLetterGivenUp DeadLetterState = "GivenUp"
)

// DeadLetterStatus is the ledger of the one dead-letter record of an action: written, as owed, in the same status write that makes the action finish in one of its sink's phases, then claimed before each delivery attempt and recorded after it, like an action's own attempts. Where it goes (sink, path, mode) is recorded here and never derived again from the destinations.
type DeadLetterStatus struct {
	// sink is the sink's identity: Destination/<namespace>/<name> or ClusterDestination/<name>.
	// +kubebuilder:validation:MaxLength=512
	Sink string `json:"sink"`
	// path is the path appended to the sink's url, as spec.deadLetter.path said when the record became owed.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Path string `json:"path,omitempty"`
	// mode is the CloudEvents HTTP content mode, as spec.deadLetter.mode said when the record became owed.
	// +optional
	Mode CloudEventMode `json:"mode,omitempty"`
	// idempotencyKey is the key sent to the sink and the CloudEvent's id: the key the sink's idempotency.keyFormat makes for the action (default namespace/name) followed by /dead-letter, never the action's own key. It is written by the first delivery claim, before anything is sent, and kept for every attempt; a record owed under an earlier version of actionledger, given the action's key followed by /dead-letter, is re-keyed by its first claim and keeps the key once a delivery attempt was claimed. Empty until the first claim.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// phase is the action's phase the record reports.
	Phase Phase `json:"phase"`
	// state is Pending, Delivering, Delivered, Failed, Uncertain, Refused or GivenUp.
	State DeadLetterState `json:"state"`
	// attempts is the number of delivery attempts claimed so far.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// claim is the delivery attempt that is open now, if any (written before the record is sent).
	// +optional
	Claim *AttemptClaim `json:"claim,omitempty"`
	// nextAttemptAt is the earliest time of the next delivery attempt.
	// +optional
	NextAttemptAt *metav1.Time `json:"nextAttemptAt,omitempty"`
	// deadline is the delivery's overall deadline: its first claim plus the sink's retryPolicy.deadline.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// deliveredAt is when the sink accepted the record.
	// +optional
	DeliveredAt *metav1.Time `json:"deliveredAt,omitempty"`
	// statusCode is the sink's last HTTP status code.
	// +optional
	StatusCode int32 `json:"statusCode,omitempty"`
	// errorClass is the class of the last transport failure, when no response arrived.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ErrorClass string `json:"errorClass,omitempty"`
	// reason is a CamelCase reason: DeadLetterDelivered, DeadLetterRetrying, DeadLetterFailed, DeadLetterUncertain, DeadLetterGivenUp, or why the sink was refused (NamespaceNotAllowed, DestinationNotReady, ...).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`
	// message says what happened, in short; never a secret.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// ResponseRecord is the recorded outcome of the deciding attempt.
type ResponseRecord struct {
	// statusCode is the HTTP status code.
	StatusCode int32 `json:"statusCode"`
	// headers are the kept response headers: Location, Content-Type, Idempotent-Replayed and Retry-After. In each value, Secret values are replaced by "[REDACTED]", and the value is cut to 2048 bytes on a UTF-8 boundary.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() <= 2048)",message="each response header value is at most 2048 characters"
	Headers map[string]string `json:"headers,omitempty"`
	// body is the response body as text, with Secret values replaced by "[REDACTED]", cut to 4096 bytes on a UTF-8 boundary. It is empty, with bodyTruncated true, when the API server refused to store the full record.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Body string `json:"body,omitempty"`
	// bodyTruncated is true when body is not the whole body: it was cut at 4096 bytes, or dropped.
	// +optional
	BodyTruncated bool `json:"bodyTruncated,omitempty"`
	// bodySHA256 is "sha256:" followed by the hex SHA-256 of the whole body as the destination sent it, before redaction; of a body sent compressed, of the body decoded (a body in a coding the manager cannot decode: as received). It is always set, so that the body can be compared with the destination's own records.
	// +optional
	BodySHA256 string `json:"bodySHA256,omitempty"`
}

// Bounds of the destination-supplied strings kept in status, in bytes. The controller cuts each value to its bound (on a UTF-8 boundary) before a status write, so a destination cannot make the write invalid.
const (
	// MaxRetryAfterLength bounds status.attemptHistory[].retryAfter.
	MaxRetryAfterLength = 64
	// MaxResponseHeaderValueLength bounds each value in status.response.headers.
	MaxResponseHeaderValueLength = 2048
	// MaxResponseBodyLength bounds status.response.body.
	MaxResponseBodyLength = 4096
	// MaxLastErrorLength bounds status.lastError.
	MaxLastErrorLength = 1024
)

// ReplaySource says that the outcome was taken from the tombstone of an earlier object with the same key and fingerprint, and that nothing was sent.
type ReplaySource struct {
	// uid is the UID of the earlier object whose outcome is replayed.
	// +optional
	UID string `json:"uid,omitempty"`
	// completedAt is when the earlier object finished.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// phase is the earlier object's terminal phase.
	// +optional
	Phase Phase `json:"phase,omitempty"`
}

// OutputsStatus names the object that spec.outputs writes and its keys; it never holds a value.
type OutputsStatus struct {
	// kind is Secret or ConfigMap.
	// +kubebuilder:validation:Enum=Secret;ConfigMap
	Kind string `json:"kind"`
	// name is the object's name, in the action's namespace.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// keys are the data keys written, sorted; empty until the object is written.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	Keys []string `json:"keys,omitempty"`
	// writtenAt is when the controller wrote the object (or found it written by this action, or retained by the earlier object this one replays).
	// +optional
	WrittenAt *metav1.Time `json:"writtenAt,omitempty"`
	// reason is the reason of the OutputsReady condition: OutputsWritten or OutputsRetained when the object holds the values; OutputMissing, OutputConflict, OutputExpressionFailed, OutputRefused, OutputLost or OutputsNotAvailable when it does not.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`
}

// Resolution is a person's decision on an OutcomeUnknown or Exhausted action.
type Resolution struct {
	// decision is applied, not-applied or retry, as given in the annotation actions.actionledger.dev/resolve.
	Decision string `json:"decision"`
	// reason is the text of the annotation actions.actionledger.dev/resolve-reason, if any.
	// +optional
	Reason string `json:"reason,omitempty"`
	// at is when the controller recorded the decision.
	At metav1.Time `json:"at"`
}

// ExternalActionStatus is the ledger of an action: what was claimed, sent and recorded. The controller writes it; do not edit it.
type ExternalActionStatus struct {
	// observedGeneration is the metadata.generation this status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase is where the action is in its lifecycle: Pending, InProgress, Succeeded, Failed, OutcomeUnknown (a send may have been applied and nothing can prove it; waits for a person), Exhausted (attempts, retry budget or deadline ran out) or Conflict (the name is bound to another request).
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// idempotencyKey is the key sent to the destination; by default namespace/name.
	// +optional
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	// fingerprint is "sha256:" followed by the hex SHA-256 of the RFC 8785 canonical JSON of destinationRef, request and successWhen. It is bound to the key when first recorded; another request under the same key ends Conflict.
	// +optional
	Fingerprint string `json:"fingerprint,omitempty"`
	// attempts is the number of attempts claimed so far.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// manualRetries counts "retry" decisions by people; each one allows one attempt beyond retryPolicy.maxAttempts.
	// +optional
	ManualRetries int32 `json:"manualRetries,omitempty"`
	// attemptHistory holds the last 10 finished attempts, oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	AttemptHistory []AttemptRecord `json:"attemptHistory,omitempty"`
	// claim is the attempt that is open now, if any.
	// +optional
	Claim *AttemptClaim `json:"claim,omitempty"`
	// nextAttemptAt is the earliest time the next attempt may be sent; nothing is sent before it.
	// +optional
	NextAttemptAt *metav1.Time `json:"nextAttemptAt,omitempty"`
	// deadline is the overall deadline: the object's creation time plus retryPolicy.deadline.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// completedAt is when the action reached a final phase, by the controller's clock.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// expiresAt is when the finished object is deleted: completedAt plus the retention. A tombstone then keeps its key and outcome. It is unset for OutcomeUnknown, which is kept until a person decides.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// replayedFrom is set when the outcome came from the tombstone of an earlier object instead of a send.
	// +optional
	ReplayedFrom *ReplaySource `json:"replayedFrom,omitempty"`
	// response is the recorded response of the attempt that decided the outcome.
	// +optional
	Response *ResponseRecord `json:"response,omitempty"`
	// outputs names the object spec.outputs writes and its keys, never the values; it is set once the outputs are settled (see the OutputsReady condition).
	// +optional
	Outputs *OutputsStatus `json:"outputs,omitempty"`
	// resolution is a person's decision, when one was made.
	// +optional
	Resolution *Resolution `json:"resolution,omitempty"`
	// deadLetter is the delivery of the action's record to its dead-letter sink (spec.deadLetter of the action, else of its destination): written in the same status write that ends the action in one of the sink's phases, and held until the record is final (Delivered, Failed, Uncertain or GivenUp): until then the action is not collected and its deletion does not finish.
	// +optional
	DeadLetter *DeadLetterStatus `json:"deadLetter,omitempty"`
	// lastError is the last failure in short form: the error class or status code, and the reason. It never contains a secret.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`
	// conditions are Ready, Reconciling and Stalled, as kstatus, Flux and Argo CD read them, OutputsReady for an action with spec.outputs, and DeadLetterDelivered for an action that owes a dead-letter record.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=xa,categories=actionledger
// +kubebuilder:printcolumn:name="PHASE",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="CODE",type=integer,JSONPath=`.status.response.statusCode`
// +kubebuilder:printcolumn:name="ATTEMPTS",type=integer,JSONPath=`.status.attempts`
// NEXT is a string column: kubectl prints a future time in a date column as <invalid>.
// +kubebuilder:printcolumn:name="NEXT",type=string,JSONPath=`.status.nextAttemptAt`,description="When the next attempt is due"
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="DESTINATION",type=string,JSONPath=`.spec.destinationRef.name`,priority=1
// +kubebuilder:printcolumn:name="ERROR",type=string,JSONPath=`.status.lastError`,priority=1
// +kubebuilder:printcolumn:name="SUBJECT",type=string,JSONPath=`.spec.subject`,priority=1
// +kubebuilder:printcolumn:name="REASON",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1,description="Why the action is not Ready, for example WaitingForSubject"
// +kubebuilder:printcolumn:name="MESSAGE",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1,description="The Ready condition's message, for example which action holds the subject"

// ExternalAction is one external side effect (an HTTP call) that the controller performs at most once per key: namespace/name is the idempotency key and the spec's fingerprint binds it.
type ExternalAction struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec declares the action.
	// +required
	Spec ExternalActionSpec `json:"spec"`

	// status is the ledger that the controller keeps: attempts, outcome and conditions.
	// +optional
	Status ExternalActionStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ExternalActionList contains a list of ExternalAction.
type ExternalActionList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExternalAction `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(SchemeGroupVersion, &ExternalAction{}, &ExternalActionList{})
		return nil
	})
}
