package retry

import (
	"net/http"
	"slices"
)

// Class is the disposition of one attempt (DESIGN rule 4).
type Class string

const (
	// ClassSuccess: a response arrived and successWhen held (the caller evaluates it).
	ClassSuccess Class = "Success"
	// ClassRejected: a business rejection, i.e. a 4xx or any other non-success
	// status not retried; it is recorded as the outcome (Failed) and not retried.
	ClassRejected Class = "Rejected"
	// ClassRetryable: the status proves the request was not processed (408, 425,
	// 429, 503), or repeating is safe; retry within the budget.
	ClassRetryable Class = "Retryable"
	// ClassInProgress: 409 from a destination that dedups on the idempotency key,
	// meaning the original request with that key is still being processed
	// (IETF draft-ietf-httpapi-idempotency-key-header); wait and ask again with the
	// same key and body.
	ClassInProgress Class = "InProgress"
	// ClassNotSent: the request never left (dial, DNS or TLS handshake failure,
	// nothing written); retry freely within the budget.
	ClassNotSent Class = "NotSent"
	// ClassUncertain: the request may have been applied (timeout or reset after it
	// was written, or a retryOnStatus code other than 408/425/429/503 when
	// repeating is not safe); resolve per DESIGN rule 3, never resend blindly.
	ClassUncertain Class = "Uncertain"
	// ClassUnjudged: a response arrived, but the evaluation of successWhen on it did not finish (DESIGN rule 12):
	// no verdict is drawn from it. The response is recorded and judged again from what was received, never by
	// sending again (the caller classifies it; Classify never returns it).
	ClassUnjudged Class = "Unjudged"
)

// Observation is what one attempt produced.
type Observation struct {
	// StatusCode is the HTTP status code, 0 when no response arrived.
	StatusCode int
	// Header holds the response headers; may be nil.
	Header http.Header
	// Err is the transport error, nil when a response arrived.
	Err error
	// Written reports that the request, or any part of it, may have reached the
	// server. It must be true unless the failure provably happened before
	// anything was written (dial, DNS, TLS handshake).
	Written bool
	// Succeeded reports that successWhen held; only meaningful with a response.
	Succeeded bool
	// RenewedCredential reports that the request carried a credential the caller drops on a 401 and obtains
	// anew for the next attempt (an OAuth2 access token): a 401 then says the request was refused before it
	// was processed (RFC 9110 §15.5.2, RFC 6750 §3.1 "invalid_token"), so it is retried.
	RenewedCredential bool
}

// Classify applies DESIGN rule 4 to one attempt.
//
// repeatSafe is true when repeating the request cannot apply its effect twice:
// the effect is Safe or Idempotent (RFC 9110 §9.2.1, §9.2.2) or the destination
// dedups on the idempotency key (see RepeatSafe). keySupported is true when the
// destination dedups on the key (idempotency.supported).
//
// In order:
//   - no response (Err != nil, or StatusCode 0): NotSent if !Written, else Uncertain;
//   - Succeeded: Success;
//   - 401 and RenewedCredential: Retryable (the next attempt carries a new token);
//   - 409 and keySupported: InProgress (the IETF Idempotency-Key draft's
//     "request with this key is still being processed");
//   - a status in p.RetryOnStatus: Retryable for 408, 425, 429 and 503, which say
//     the request was not processed; otherwise Retryable if repeatSafe, else
//     Uncertain (RFC 9110 §9.2.2: an unsafe request is not repeated until it is
//     known not to have been applied);
//   - anything else: Rejected.
func Classify(o Observation, p Policy, repeatSafe, keySupported bool) Class {
	if o.Err != nil || o.StatusCode == 0 {
		if !o.Written {
			return ClassNotSent
		}
		return ClassUncertain
	}
	if o.Succeeded {
		return ClassSuccess
	}
	if o.StatusCode == http.StatusUnauthorized && o.RenewedCredential {
		return ClassRetryable
	}
	if o.StatusCode == http.StatusConflict && keySupported {
		return ClassInProgress
	}
	if slices.ContainsFunc(p.RetryOnStatus, func(c int32) bool { return int(c) == o.StatusCode }) {
		if notProcessedStatus(o.StatusCode) || repeatSafe {
			return ClassRetryable
		}
		return ClassUncertain
	}
	return ClassRejected
}

// notProcessedStatus reports whether the status itself says the request was not
// processed: 408 Request Timeout (RFC 9110 §15.5.9), 425 Too Early (RFC 8470 §5.2),
// 429 Too Many Requests (RFC 6585 §4), 503 Service Unavailable (RFC 9110 §15.6.4).
func notProcessedStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// Effect values of the CONTRACT `effect` field.
const (
	// EffectSafe: the request has no effect on the destination (RFC 9110 §9.2.1).
	EffectSafe = "Safe"
	// EffectIdempotent: repeating the request has the same effect as sending it
	// once (RFC 9110 §9.2.2).
	EffectIdempotent = "Idempotent"
	// EffectUnsafe: repeating the request may apply its effect again.
	EffectUnsafe = "Unsafe"
)

// EffectiveEffect returns the effect to assume for a request. A declared effect
// (Safe, Idempotent, Unsafe) wins. An empty effect follows the method semantics of
// RFC 9110 §9.2: GET, HEAD, OPTIONS and TRACE are Safe; PUT and DELETE are
// Idempotent; POST, PATCH and any other method are Unsafe. Method names are
// case-sensitive (RFC 9110 §9.1). An unrecognised effect value is Unsafe.
func EffectiveEffect(effect, method string) string {
	switch effect {
	case EffectSafe, EffectIdempotent, EffectUnsafe:
		return effect
	case "":
	default:
		return EffectUnsafe
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return EffectSafe
	case http.MethodPut, http.MethodDelete:
		return EffectIdempotent
	}
	return EffectUnsafe
}

// RepeatSafe reports whether repeating the request cannot apply its effect twice
// (DESIGN rule 3): the effective effect (EffectiveEffect) is Safe or Idempotent,
// or keySupported, i.e. the destination dedups on the idempotency key.
func RepeatSafe(effect, method string, keySupported bool) bool {
	switch EffectiveEffect(effect, method) {
	case EffectSafe, EffectIdempotent:
		return true
	}
	return keySupported
}
