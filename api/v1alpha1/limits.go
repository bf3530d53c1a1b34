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

import "time"

// Defaults the controller applies where a field is unset (an object stored before the default existed, or one
// that did not pass the API server's defaulting). The CRDs write each value out in a +kubebuilder:default marker
// as well; TestDefaultsAgree in internal/destination checks that the generated CRDs agree.
const (
	// DefaultTimeout is a destination's per-attempt timeout when spec.timeout is not set (30 s). The ledger's
	// claim, the dead-letter claim, the destination resolver and the HTTP executor all fall back to it.
	DefaultTimeout = 30 * time.Second
)

// Admission bounds. The API server enforces them through the CEL rules and OpenAPI markers on the types in this
// package (a marker cannot name a Go constant, so each value is written out in its marker as well; the
// admission tests in test/integration/admission accept each bound exactly and refuse one step beyond it).
// Durations are Go duration strings (time.ParseDuration syntax such as "1s", "5m", "1h30m"); CEL's duration()
// parses them the same way.
const (
	// MaxTimeout bounds a destination's per-attempt timeout (spec.timeout), which must also be positive.
	// A claim lasts timeout plus a margin (DESIGN rule 3), so this also bounds how long a crashed send blocks.
	MaxTimeout = 10 * time.Minute

	// MaxBackoff bounds retryPolicy.initialBackoff and retryPolicy.maxBackoff (Destination and ExternalAction).
	MaxBackoff = 24 * time.Hour

	// MaxDeadline bounds retryPolicy.deadline, the overall budget from creation; it must also be positive.
	MaxDeadline = 30 * 24 * time.Hour

	// MaxRetryBudgetWindow bounds retryBudget.window, the sliding window of first attempts; it must be positive.
	MaxRetryBudgetWindow = time.Hour

	// MaxTTLAfterFinished bounds retention.ttlAfterFinished and ExternalAction spec.ttlSecondsAfterFinished.
	MaxTTLAfterFinished = 90 * 24 * time.Hour

	// MaxTombstoneTTL bounds retention.tombstoneTTL, the replay horizon (DESIGN rule 7).
	MaxTombstoneTTL = 400 * 24 * time.Hour

	// MaxDurationLength bounds every duration string, so that the API server can estimate the cost of the
	// CEL rules that parse it.
	MaxDurationLength = 32

	// MaxRequestHeaders bounds the number of ExternalAction spec.request.headers.
	MaxRequestHeaders = 32

	// MaxHeaderNameLength bounds a header name.
	MaxHeaderNameLength = 256

	// MaxHeaderValueBytes bounds one ExternalAction header value, in bytes of UTF-8 (8 KiB).
	MaxHeaderValueBytes = 8192

	// MaxOutputValues bounds the number of keys of ExternalAction spec.outputs.values.
	MaxOutputValues = 32

	// MaxOutputExpressionLength bounds one expression of spec.outputs.values, in characters.
	MaxOutputExpressionLength = 4096

	// MaxOutputResponseBytes is how much of the response body the expressions of spec.outputs.values see, in
	// bytes (256 KiB); status keeps only MaxResponseBodyLength of it.
	MaxOutputResponseBytes = 256 << 10
)
