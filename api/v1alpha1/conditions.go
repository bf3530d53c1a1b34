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

// Condition types, as kstatus, Flux and Argo CD read them.
const (
	// ConditionReady is True only in phase Succeeded.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the action is Pending or InProgress.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True in Failed, Exhausted, OutcomeUnknown and Conflict: nothing more happens without a person.
	// It is also True, with Reconciling False, on a Pending or InProgress action whose destination is missing or
	// unusable (reasons DestinationNotReady, NamespaceNotAllowed, EgressDenied, ...): the action resumes by itself
	// once the destination is fixed; and on a Pending action that waits (reason SubjectOutcomeUnknown) behind an
	// OutcomeUnknown holder of its subject, until a person decides that holder. On a finished action whose
	// dead-letter record cannot be delivered because its sink cannot be used, its reason is
	// DeadLetterSinkUnavailable (the message names the sink) until the sink is usable or the record given up.
	ConditionStalled = "Stalled"
	// ConditionOutputsReady is set only on an action with spec.outputs, once it Succeeded: True when the target
	// Secret or ConfigMap holds the values (reasons OutputsWritten, OutputsRetained), False while they are being
	// written (OutputsPending) or when they cannot be (OutputMissing, OutputConflict, OutputExpressionFailed,
	// OutputRefused, OutputLost, OutputsNotAvailable). Ready is True only when OutputsReady is True; in the
	// False cases other than OutputsPending, Stalled is True (a person must act) and the phase stays Succeeded.
	ConditionOutputsReady = "OutputsReady"
	// ConditionDeadLetterDelivered is set only on an action that owes a dead-letter record (status.deadLetter,
	// docs/deadletter.md): True once the sink accepted it (reason DeadLetterDelivered), False otherwise with
	// status.deadLetter.reason (DeadLetterRetrying while due or in flight; DeadLetterFailed, DeadLetterUncertain
	// or DeadLetterGivenUp when it ended without delivery; the sink's refusal reason while the sink cannot be
	// used). The action is not collected, nor its deletion finished, before the record is final.
	ConditionDeadLetterDelivered = "DeadLetterDelivered"
)

// Condition reasons (CamelCase, as Kubernetes API conventions ask).
const (
	ReasonPending                = "Pending"                // accepted, not yet claimed
	ReasonAttemptInProgress      = "AttemptInProgress"      // a claim is open
	ReasonRetryScheduled         = "RetryScheduled"         // waiting for nextAttemptAt
	ReasonRateLimited            = "RateLimited"            // waiting for the destination's rate limit or Retry-After pause
	ReasonRetryBudgetExhausted   = "RetryBudgetExhausted"   // waiting for the destination's retry budget
	ReasonConcurrencyLimited     = "ConcurrencyLimited"     // waiting for room in the destination's requests in flight
	ReasonSucceeded              = "Succeeded"              // successWhen held
	ReasonReplayed               = "Replayed"               // the outcome came from a tombstone
	ReasonRejected               = "Rejected"               // business rejection by the destination
	ReasonInvalidSpec            = "InvalidSpec"            // bad CEL, body too large, looser retry policy
	ReasonDestinationNotReady    = "DestinationNotReady"    // destination missing or unusable
	ReasonSecretNotAllowed       = "SecretNotAllowed"       // a Secret outside the allowed namespace, or one the Destination's ServiceAccount may not get, was named
	ReasonFingerprintConflict    = "FingerprintConflict"    // the key is bound to another fingerprint
	ReasonOutcomeUnknown         = "OutcomeUnknown"         // uncertain and unprovable; waits for a person
	ReasonPostCheckPending       = "PostCheckPending"       // asking the destination's post-check
	ReasonAttemptsExhausted      = "AttemptsExhausted"      // maxAttempts reached
	ReasonDeadlineExceeded       = "DeadlineExceeded"       // the overall deadline passed
	ReasonRetryAfterPastDeadline = "RetryAfterPastDeadline" // the destination asked to wait past the deadline
	ReasonResolved               = "Resolved"               // a person decided
	// ReasonVerdictPending: the attempt's response is recorded, but spec.successWhen's evaluation on it did not
	// finish (its deadline, a wait for an evaluation slot, cancellation); it is evaluated again from the recorded
	// response at status.claim.expiresAt, never by sending again (DESIGN rule 12, status.claim.verdict).
	ReasonVerdictPending = "VerdictPending"
	// ReasonVerdictUnavailable: an attempt's response can never be judged (its evaluation is over the cost
	// limit, it did not finish in MaxUnfinishedEvaluations tries, or the response it needs was not kept): the
	// action is OutcomeUnknown with the response recorded, for a person to decide (applied, not-applied, retry).
	// Never Failed: no verdict is drawn from an evaluation that did not finish.
	ReasonVerdictUnavailable = "VerdictUnavailable"
	// ReasonEgressDenied: the manager's egress policy refuses the destination's address (a Destination's
	// Ready condition when its URL host is, or resolves only to, denied addresses; attempts record it as
	// attemptHistory[].errorClass). Changed with the --destination-allow-cidrs / --destination-deny-cidrs flags.
	ReasonEgressDenied = "EgressDenied"
	// ReasonPathOutsideBase: the request path (or the post-check path) would leave the destination's base
	// path (a "." or ".." segment in any encoding, an encoded "/" or a backslash); nothing was sent (Failed).
	ReasonPathOutsideBase = "PathOutsideBase"
	// ReasonNamespaceNotAllowed: the ClusterDestination's namespaceSelector does not match the action's
	// namespace; nothing is sent, the action waits in Pending until the namespace's labels match.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonInsecureSkipVerifyNotAllowed: a namespaced Destination sets tls.insecureSkipVerify but the manager
	// runs without --insecure-skip-verify-allowed; the Destination is not Ready and its actions wait.
	ReasonInsecureSkipVerifyNotAllowed = "InsecureSkipVerifyNotAllowed"
	// ReasonWaitingForSubject: another action of the namespace holds (or comes before this one on) the same
	// spec.subject; nothing is sent, the action stays Pending (Reconciling True) and proceeds by itself when the
	// holder finishes, is resolved or is deleted. The message names the holder.
	ReasonWaitingForSubject = "WaitingForSubject"
	// ReasonSubjectOutcomeUnknown: the holder of the same spec.subject is OutcomeUnknown; nothing is sent, the
	// action stays Pending with Stalled True (Reconciling False) until a person decides the holder (the resolve
	// annotation) or deletes it. The message names the holder and the decision to make.
	ReasonSubjectOutcomeUnknown = "SubjectOutcomeUnknown"
	// ReasonTombstoneStoreUnavailable: the tombstone store (ActionTombstone objects or PostgreSQL, manager flag
	// --tombstone-store) could not say whether this key was used before, so nothing is sent yet: the action
	// stays Pending with Reconciling True and is looked up again with a growing delay (at most 30s).
	ReasonTombstoneStoreUnavailable = "TombstoneStoreUnavailable"
)

// Reasons of the OutputsReady condition (spec.outputs); status.outputs.reason repeats the current one.
const (
	// ReasonOutputsPending: the action Succeeded and the values, held in the controller's memory only, are being
	// written to the target (Ready False, Reconciling True).
	ReasonOutputsPending = "OutputsPending"
	// ReasonOutputsWritten: the target holds the values taken from the response (OutputsReady and Ready True).
	ReasonOutputsWritten = "OutputsWritten"
	// ReasonOutputsRetained: the action was replayed from a tombstone and the retained target (outputs.retain)
	// written by the earlier object with the same key and fingerprint still exists; it is used as it is.
	ReasonOutputsRetained = "OutputsRetained"
	// ReasonOutputMissing: the target was written and has been deleted since; it is not re-created (the values
	// are kept nowhere else) and nothing is sent again.
	ReasonOutputMissing = "OutputMissing"
	// ReasonOutputConflict: an object with the target's name exists that this action did not create; it is
	// never changed. A Warning Event says so.
	ReasonOutputConflict = "OutputConflict"
	// ReasonOutputExpressionFailed: an expression of spec.outputs.values failed on the response (for example a
	// field missing from the body); nothing is written and nothing is sent again.
	ReasonOutputExpressionFailed = "OutputExpressionFailed"
	// ReasonOutputRefused: the API server refused the target as invalid (for example values over its 1 MiB size
	// limit); nothing is written and nothing is sent again.
	ReasonOutputRefused = "OutputRefused"
	// ReasonOutputLost: the controller stopped (or lost leadership) after recording Succeeded and before writing
	// the target; the values were in its memory only, so they are gone, and nothing is sent again.
	ReasonOutputLost = "OutputLost"
	// ReasonOutputsNotAvailable: the outcome did not come from a response of this action's request (a replay from
	// a tombstone, a person's decision "applied", a post-check that proved the attempt applied), so there is
	// nothing to take the values from.
	ReasonOutputsNotAvailable = "OutputsNotAvailable"
)

// Reasons of status.deadLetter (and of its Events), docs/deadletter.md.
const (
	// ReasonDeadLetterDelivered: the sink accepted the record.
	ReasonDeadLetterDelivered = "DeadLetterDelivered"
	// ReasonDeadLetterRetrying: a delivery attempt failed in a way that proves nothing was applied (or the sink
	// deduplicates); the next one is scheduled within the sink's retry policy.
	ReasonDeadLetterRetrying = "DeadLetterRetrying"
	// ReasonDeadLetterFailed: the sink refused the record or its retry policy ran out; it is not sent again.
	ReasonDeadLetterFailed = "DeadLetterFailed"
	// ReasonDeadLetterUncertain: a delivery may have reached a sink that does not deduplicate; it is not sent again.
	ReasonDeadLetterUncertain = "DeadLetterUncertain"
	// ReasonDeadLetterGivenUp: a person gave the record up (AnnotationDeadLetter); it is not sent again, and the
	// action may be collected.
	ReasonDeadLetterGivenUp = "DeadLetterGivenUp"
	// ReasonDeadLetterSinkUnavailable (the Stalled condition of a finished action): the record owed to the sink
	// named in the message cannot be delivered, because the sink is missing or cannot be used; the action is kept
	// (not collected, its deletion not finished) until the sink is usable again or a person gives the record up.
	ReasonDeadLetterSinkUnavailable = "DeadLetterSinkUnavailable"
)

// Event reasons of status writes the API server refused as Invalid (docs/security.md).
const (
	// ReasonUnclaimedOutcomeDiffers (a Warning Event): two sends of a first attempt without a claim
	// (idempotency.claim WhenUnsafe; two managers, or a manager restarted between a send and its record) were
	// answered differently, one a success and the other not; the outcome recorded first stays. The destination's
	// deduplication did not give both the same answer, so a person should check the effect.
	ReasonUnclaimedOutcomeDiffers = "UnclaimedOutcomeDiffers"
	// ReasonStatusTrimmed: the status was recorded without the destination's response body, headers and
	// Retry-After, because the API server refused the full record.
	ReasonStatusTrimmed = "StatusTrimmed"
	// ReasonStatusRefused: even the trimmed status was refused; the outcome held in memory was dropped (an open
	// claim then follows DESIGN rule 3 once it expires).
	ReasonStatusRefused = "StatusRefused"
	// ReasonInvalidDecision (a Warning Event): a decision annotation (AnnotationResolve, AnnotationDeadLetter) could
	// not apply; it was removed and nothing changed.
	ReasonInvalidDecision = "InvalidDecision"
)

// Annotations read by the controller.
const (
	// AnnotationResolve carries a person's decision on an OutcomeUnknown or Exhausted action:
	// "applied", "not-applied" or "retry". The controller records it in status.resolution and removes it.
	AnnotationResolve = "actions.actionledger.dev/resolve"
	// AnnotationResolveReason optionally explains the decision; it is copied to status.resolution.reason.
	AnnotationResolveReason = "actions.actionledger.dev/resolve-reason"
	// AnnotationDeadLetter carries a person's decision on the action's dead-letter record: "give-up"
	// (DeadLetterGiveUp) ends a record that is not final without delivering it (state GivenUp), so that the action
	// can be collected or its deletion finish. The controller records it in status.deadLetter, emits an Event,
	// counts it (actionledger_dead_letter_deliveries_total, outcome GivenUp) and removes the annotation.
	AnnotationDeadLetter = "actions.actionledger.dev/dead-letter"
	// AnnotationDeadLetterReason optionally explains the decision; it is copied to status.deadLetter.message.
	AnnotationDeadLetterReason = "actions.actionledger.dev/dead-letter-reason"
	// LabelOutput marks a Secret or ConfigMap written for spec.outputs (value "true"); the manager watches and
	// caches only the metadata of objects with this label.
	LabelOutput = "actions.actionledger.dev/output"
	// AnnotationOutputOf, on an output object, is the name of the ExternalAction (same namespace) that wrote it.
	AnnotationOutputOf = "actions.actionledger.dev/output-of"
	// AnnotationOutputOfUID, on an output object, is the UID of the ExternalAction that wrote it: an object
	// without this action's UID is not the action's, and is never changed.
	AnnotationOutputOfUID = "actions.actionledger.dev/output-of-uid"
	// AnnotationTraceparent carries a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>) of the pipeline that created
	// the action: the action's spans join that trace (docs/tracing.md). A malformed value is ignored.
	AnnotationTraceparent = "actions.actionledger.dev/traceparent"
	// Finalizer keeps deletion honest (DESIGN rule 8): the tombstone is written before it is removed.
	Finalizer = "actions.actionledger.dev/ledger"
)

// Decisions accepted in AnnotationResolve.
const (
	DecisionApplied    = "applied"
	DecisionNotApplied = "not-applied"
	DecisionRetry      = "retry"
)

// DeadLetterGiveUp is the decision accepted in AnnotationDeadLetter.
const DeadLetterGiveUp = "give-up"
