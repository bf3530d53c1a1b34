package retry

import (
	"context"
	"errors"
	"net/http"
	"testing"
)

func TestClassify(t *testing.T) {
	def := Policy{RetryOnStatus: DefaultRetryOnStatus()}
	none := Policy{}
	dialErr := errors.New("dial tcp 10.0.0.1:443: connect: connection refused")
	timeout := context.DeadlineExceeded
	tests := []struct {
		name                     string
		o                        Observation
		p                        Policy
		repeatSafe, keySupported bool
		want                     Class
	}{
		// Transport errors.
		{"dial error, nothing written", Observation{Err: dialErr}, def, false, false, ClassNotSent},
		{"dial error, unsafe, no key: still free", Observation{Err: dialErr}, none, false, false, ClassNotSent},
		{"timeout after write (C03)", Observation{Err: timeout, Written: true}, def, false, false, ClassUncertain},
		{"timeout after write, repeat safe: still uncertain", Observation{Err: timeout, Written: true}, def, true, true, ClassUncertain},
		{"error wins over a status code", Observation{Err: timeout, StatusCode: 200, Succeeded: true, Written: true}, def, false, false, ClassUncertain},
		{"no response and no error, written", Observation{Written: true}, def, false, false, ClassUncertain},
		{"no response and no error, not written", Observation{}, def, false, false, ClassNotSent},
		// Success.
		{"200 successWhen held", Observation{StatusCode: 200, Succeeded: true, Written: true}, def, false, false, ClassSuccess},
		{"500 successWhen held", Observation{StatusCode: 500, Succeeded: true, Written: true}, def, false, false, ClassSuccess},
		{"409 successWhen held beats in-progress", Observation{StatusCode: 409, Succeeded: true, Written: true}, def, true, true, ClassSuccess},
		{"200 successWhen failed", Observation{StatusCode: 200, Written: true}, def, true, true, ClassRejected},
		// 409 from a deduplicating destination.
		{"409 key in use (C03)", Observation{StatusCode: 409, Written: true, Header: http.Header{"Content-Type": {"application/json"}}}, def, true, true, ClassInProgress},
		{"409 without key support is a rejection", Observation{StatusCode: 409, Written: true}, def, false, false, ClassRejected},
		{"409 in retryOnStatus without key support, unsafe", Observation{StatusCode: 409, Written: true}, Policy{RetryOnStatus: []int32{409}}, false, false, ClassUncertain},
		// Status codes that prove nothing was processed.
		{"408 unsafe", Observation{StatusCode: 408, Written: true}, def, false, false, ClassRetryable},
		{"425 unsafe", Observation{StatusCode: 425, Written: true}, def, false, false, ClassRetryable},
		{"429 unsafe", Observation{StatusCode: 429, Written: true}, def, false, false, ClassRetryable},
		{"503 unsafe", Observation{StatusCode: 503, Written: true}, def, false, false, ClassRetryable},
		{"503 not in retryOnStatus", Observation{StatusCode: 503, Written: true}, none, true, true, ClassRejected},
		{"429 not in retryOnStatus", Observation{StatusCode: 429, Written: true}, Policy{RetryOnStatus: []int32{500}}, false, false, ClassRejected},
		// Other retryOnStatus codes depend on repeat safety.
		{"500 unsafe without key (C10)", Observation{StatusCode: 500, Written: true}, def, false, false, ClassUncertain},
		{"500 with key support (C10)", Observation{StatusCode: 500, Written: true}, def, true, true, ClassRetryable},
		{"500 idempotent effect", Observation{StatusCode: 500, Written: true}, def, true, false, ClassRetryable},
		{"502 unsafe", Observation{StatusCode: 502, Written: true}, def, false, false, ClassUncertain},
		{"502 repeat safe", Observation{StatusCode: 502, Written: true}, def, true, false, ClassRetryable},
		{"504 unsafe (C03 proxy)", Observation{StatusCode: 504, Written: true}, def, false, false, ClassUncertain},
		{"504 with key support (C03 proxy)", Observation{StatusCode: 504, Written: true}, def, true, true, ClassRetryable},
		{"500 not in retryOnStatus", Observation{StatusCode: 500, Written: true}, none, true, true, ClassRejected},
		{"custom retryOnStatus 418, safe", Observation{StatusCode: 418, Written: true}, Policy{RetryOnStatus: []int32{418}}, true, false, ClassRetryable},
		// 401 with a credential that is renewed on a 401 (OAuth2): refused before processing, retried.
		{"401 with a renewed OAuth2 token, unsafe", Observation{StatusCode: 401, Written: true, RenewedCredential: true}, def, false, false, ClassRetryable},
		{"401 with a renewed token, not in retryOnStatus", Observation{StatusCode: 401, Written: true, RenewedCredential: true}, none, false, false, ClassRetryable},
		{"401 with a static credential is a rejection", Observation{StatusCode: 401, Written: true}, def, true, true, ClassRejected},
		{"403 with a renewed token is a rejection", Observation{StatusCode: 403, Written: true, RenewedCredential: true}, def, false, false, ClassRejected},
		{"401 successWhen held", Observation{StatusCode: 401, Written: true, Succeeded: true, RenewedCredential: true}, def, false, false, ClassSuccess},
		// Business rejections.
		{"422 (C10)", Observation{StatusCode: 422, Written: true}, def, true, true, ClassRejected},
		{"400", Observation{StatusCode: 400, Written: true}, def, false, false, ClassRejected},
		{"404 repeat safe", Observation{StatusCode: 404, Written: true}, def, true, false, ClassRejected},
		{"301 not followed", Observation{StatusCode: 301, Written: true}, def, false, false, ClassRejected},
		{"501", Observation{StatusCode: 501, Written: true}, def, true, true, ClassRejected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.o, tc.p, tc.repeatSafe, tc.keySupported); got != tc.want {
				t.Errorf("Classify(%+v, repeatSafe=%v, keySupported=%v) = %s, want %s", tc.o, tc.repeatSafe, tc.keySupported, got, tc.want)
			}
		})
	}
}

func TestEffectiveEffectAndRepeatSafe(t *testing.T) {
	tests := []struct {
		effect, method string
		keySupported   bool
		wantEffect     string
		wantSafe       bool
	}{
		{"", "GET", false, EffectSafe, true},
		{"", "HEAD", false, EffectSafe, true},
		{"", "OPTIONS", false, EffectSafe, true},
		{"", "TRACE", false, EffectSafe, true},
		{"", "PUT", false, EffectIdempotent, true},
		{"", "DELETE", false, EffectIdempotent, true},
		{"", "POST", false, EffectUnsafe, false},
		{"", "PATCH", false, EffectUnsafe, false},
		{"", "CONNECT", false, EffectUnsafe, false},
		{"", "PROPFIND", false, EffectUnsafe, false},
		{"", "get", false, EffectUnsafe, false}, // methods are case-sensitive
		{"", "", false, EffectUnsafe, false},
		{"", "POST", true, EffectUnsafe, true},
		{"Safe", "POST", false, EffectSafe, true},
		{"Idempotent", "POST", false, EffectIdempotent, true},
		{"Unsafe", "GET", false, EffectUnsafe, false},
		{"Unsafe", "PUT", true, EffectUnsafe, true},
		{"safe", "GET", false, EffectUnsafe, false}, // unknown effect value
		{"Bogus", "DELETE", true, EffectUnsafe, true},
	}
	for _, tc := range tests {
		if got := EffectiveEffect(tc.effect, tc.method); got != tc.wantEffect {
			t.Errorf("EffectiveEffect(%q, %q) = %q, want %q", tc.effect, tc.method, got, tc.wantEffect)
		}
		if got := RepeatSafe(tc.effect, tc.method, tc.keySupported); got != tc.wantSafe {
			t.Errorf("RepeatSafe(%q, %q, %v) = %v, want %v", tc.effect, tc.method, tc.keySupported, got, tc.wantSafe)
		}
	}
}
