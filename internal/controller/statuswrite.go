package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
)

// maxEventNoteLength is the API server's bound on an Event's note (message), in bytes: longer ones are refused.
const maxEventNoteLength = 1024

// maxConditionMessageLength is metav1.Condition's bound on message, in bytes.
const maxConditionMessageLength = 32768

// errStatusRefused marks a status write that the API server refused as Invalid (HTTP 422) even with every
// destination-supplied value dropped: retrying it cannot succeed.
var errStatusRefused = errors.New("status refused as invalid")

// updateStatus writes upd's status with an Update carrying upd's resourceVersion (so a claim keeps DESIGN rule 1).
// Every destination-supplied string is first cut to its status field's bound (boundStatus). When the API server
// still answers Invalid, the write is retried once with those strings dropped (minimalStatus), and after that
// write a Warning Event StatusTrimmed says so. An Invalid answer to the second write is errStatusRefused.
// Other errors (Conflict, NotFound, unavailable) are returned as they are.
func (r *ExternalActionReconciler) updateStatus(ctx context.Context, upd *actionsv1alpha1.ExternalAction) error {
	boundStatus(&upd.Status)
	err := r.Status().Update(ctx, upd)
	if !apierrors.IsInvalid(err) {
		return err
	}
	minimalStatus(&upd.Status, fmt.Sprintf("the API server refused the full status (%s); recorded without the "+
		"destination's response body, response headers and Retry-After", invalidFields(err)))
	if err2 := r.Status().Update(ctx, upd); err2 != nil {
		if apierrors.IsInvalid(err2) {
			return fmt.Errorf("%w (%s), also without the destination's values (%s)", errStatusRefused,
				invalidFields(err), invalidFields(err2))
		}
		return err2
	}
	r.event(upd, &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonStatusTrimmed, Message: upd.Status.LastError})
	return nil
}

// refused reports a status write refused even without the destination's values (errStatusRefused): a Warning
// Event StatusRefused, and a terminal error, since retrying the same status cannot succeed.
func (r *ExternalActionReconciler) refused(xa *actionsv1alpha1.ExternalAction, what string, err error) error {
	r.event(xa, &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonStatusRefused,
		Message: fmt.Sprintf("%s cannot be written: %v; nothing more is done until the object changes", what, err)})
	return reconcile.TerminalError(err)
}

// boundStatus cuts every string a destination can supply to its field's bound in the CRD, on a UTF-8 boundary:
// attemptHistory[].retryAfter, lastError, response header values, response body and condition messages.
func boundStatus(st *actionsv1alpha1.ExternalActionStatus) {
	for i := range st.AttemptHistory {
		st.AttemptHistory[i].RetryAfter = cutUTF8(st.AttemptHistory[i].RetryAfter, actionsv1alpha1.MaxRetryAfterLength)
	}
	st.LastError = cutUTF8(st.LastError, actionsv1alpha1.MaxLastErrorLength)
	if rec := st.Response; rec != nil {
		for k, v := range rec.Headers {
			rec.Headers[k] = cutUTF8(v, actionsv1alpha1.MaxResponseHeaderValueLength)
		}
		if len(rec.Body) > actionsv1alpha1.MaxResponseBodyLength {
			rec.Body, rec.BodyTruncated = cutUTF8(rec.Body, actionsv1alpha1.MaxResponseBodyLength), true
		}
	}
	for i := range st.Conditions {
		st.Conditions[i].Message = cutUTF8(st.Conditions[i].Message, maxConditionMessageLength)
	}
}

// minimalStatus drops the destination-supplied strings of a status that the API server refused: the response
// keeps its status code and hash, loses body and headers (bodyTruncated true), Retry-After values go, and
// lastError carries note. Phase, conditions, claim and history (the decision) are kept.
func minimalStatus(st *actionsv1alpha1.ExternalActionStatus, note string) {
	if rec := st.Response; rec != nil {
		rec.Body, rec.Headers, rec.BodyTruncated = "", nil, true
	}
	for i := range st.AttemptHistory {
		st.AttemptHistory[i].RetryAfter = ""
	}
	st.LastError = cutUTF8(note, actionsv1alpha1.MaxLastErrorLength)
}

// invalidFields names the fields and causes of an Invalid error without their values (a value may come from
// the destination, and logs and events never carry one).
func invalidFields(err error) string {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil || len(se.Status().Details.Causes) == 0 {
		return "invalid"
	}
	var parts []string
	for _, c := range se.Status().Details.Causes {
		parts = append(parts, fmt.Sprintf("%s: %s", c.Field, c.Type))
	}
	return cutUTF8(strings.Join(parts, ", "), 512)
}

// statusWriteBackoff is the one bounded backoff of status writes retried in place (an outcome, a post-check
// verdict): 50 ms doubling, jittered by 10%, ending once a step would pass 2 s (six sleeps, about 3 s in all). A
// Conflict re-reads at once and costs a step without sleeping. After the last step the write is left to the
// workqueue's rate-limited retry; an outcome stays in memory meanwhile (DESIGN rule 2).
var statusWriteBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 2 * time.Second}

// sleepStep sleeps b's next step, or returns ctx's error, or an error when b has no step left.
func sleepStep(ctx context.Context, b *wait.Backoff) error {
	if b.Steps <= 0 {
		return errors.New("status write retries exhausted")
	}
	t := time.NewTimer(b.Step())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
