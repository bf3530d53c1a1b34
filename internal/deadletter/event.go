package deadletter

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cevent "github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"k8s.io/apimachinery/pkg/api/meta"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// EventType is the CloudEvents type of a dead-letter record.
const EventType = "dev.actionledger.externalaction.deadletter"

// Record is the data of a dead-letter CloudEvent (JSON): what a system downstream needs to take the case over.
// Body is status.response.body as recorded: Secret values redacted, cut at 4096 bytes (BodyTruncated).
type Record struct {
	// Key is the sink's key for the action: the record's key (the CloudEvent id, status.deadLetter.idempotencyKey)
	// without KeySuffix, made by the sink's keyFormat. It is never the action's own key, which the action's
	// destination made: a tenant's own Destination may have any keyFormat (team-b/{name} in namespace team-a),
	// so at a shared sink that key could name another tenant's action.
	Key string `json:"key"`
	// ActionKey is the key the action itself was sent under (status.idempotencyKey), made by its own destination's
	// keyFormat. It is the tenant's own value, meaningful only within Namespace: it may look like another
	// namespace's key, and never identifies the record or the action at the sink.
	ActionKey   string                `json:"actionKey,omitempty"`
	Namespace   string                `json:"namespace"`
	Name        string                `json:"name"`
	UID         string                `json:"uid,omitempty"`
	Destination string                `json:"destination"`
	Fingerprint string                `json:"fingerprint,omitempty"`
	Phase       actionsv1alpha1.Phase `json:"phase"`
	Reason      string                `json:"reason,omitempty"`
	Message     string                `json:"message,omitempty"`
	Attempts    int32                 `json:"attempts"`
	LastError   string                `json:"lastError,omitempty"`
	StatusCode  int32                 `json:"statusCode,omitempty"`
	Body        string                `json:"body,omitempty"`
	// BodyTruncated and BodySHA256 are those of status.response.
	BodyTruncated bool       `json:"bodyTruncated,omitempty"`
	BodySHA256    string     `json:"bodySHA256,omitempty"`
	CompletedAt   *time.Time `json:"completedAt,omitempty"`
	// TraceID is the trace id of the last attempt, when it was traced.
	TraceID string `json:"traceID,omitempty"`
}

// RecordOf is the dead-letter record of xa, sent to its destination destID under the record's key recordKey
// (status.deadLetter.idempotencyKey: the sink's key for the action followed by KeySuffix, Key). The record's
// data.key is the sink's key for the action (recordKey without KeySuffix), so that it agrees with the event's
// id on every attempt; the action's own key is only in ActionKey.
func RecordOf(xa *actionsv1alpha1.ExternalAction, destID, recordKey string) Record {
	st := &xa.Status
	r := Record{Key: strings.TrimSuffix(recordKey, KeySuffix), ActionKey: st.IdempotencyKey, Namespace: xa.Namespace,
		Name: xa.Name, UID: string(xa.UID), Destination: destID, Fingerprint: st.Fingerprint, Phase: st.Phase,
		Attempts: st.Attempts, LastError: st.LastError}
	if c := meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionReady); c != nil {
		r.Reason, r.Message = c.Reason, c.Message
	}
	if rec := st.Response; rec != nil {
		r.StatusCode, r.Body, r.BodyTruncated, r.BodySHA256 = rec.StatusCode, rec.Body, rec.BodyTruncated, rec.BodySHA256
	}
	if st.CompletedAt != nil {
		t := st.CompletedAt.UTC()
		r.CompletedAt = &t
	}
	if n := len(st.AttemptHistory); n > 0 {
		r.TraceID = st.AttemptHistory[n-1].TraceID
	}
	return r
}

// Source is the CloudEvents source of xa's records: the action's API path, a URI reference that is unique per
// action (with the id, the key, it identifies the event: consumers may treat equal source and id as duplicates).
func Source(namespace, name string) string {
	return "/apis/" + actionsv1alpha1.GroupVersion.String() + "/namespaces/" + namespace + "/externalactions/" + name
}

// Encode writes rec as a CloudEvents 1.0 event with id (the record's key) in mode (Binary by default, or
// Structured) of the HTTP protocol binding, with the CloudEvents Go SDK: the headers (ce-* attributes and
// Content-Type) and the body to send.
func Encode(ctx context.Context, rec Record, id string, mode actionsv1alpha1.CloudEventMode) (http.Header, []byte, error) {
	e := cevent.New(cevent.CloudEventsVersionV1)
	e.SetID(id)
	e.SetType(EventType)
	e.SetSource(Source(rec.Namespace, rec.Name))
	e.SetSubject(rec.Namespace + "/" + rec.Name)
	if rec.CompletedAt != nil {
		e.SetTime(*rec.CompletedAt)
	}
	if err := e.SetData(cevent.ApplicationJSON, rec); err != nil {
		return nil, nil, fmt.Errorf("encoding the dead-letter record: %w", err)
	}
	if err := e.Validate(); err != nil {
		return nil, nil, fmt.Errorf("the dead-letter record is not a valid CloudEvent: %w", err)
	}
	if mode == actionsv1alpha1.CloudEventStructured {
		ctx = binding.WithForceStructured(ctx)
	} else {
		ctx = binding.WithForceBinary(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sink.invalid/", nil)
	if err != nil {
		return nil, nil, err
	}
	if err := cehttp.WriteRequest(ctx, binding.ToMessage(&e), req); err != nil {
		return nil, nil, fmt.Errorf("writing the dead-letter CloudEvent: %w", err)
	}
	var body []byte
	if req.Body != nil {
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, req.Body); err != nil {
			return nil, nil, err
		}
		_ = req.Body.Close()
		body = buf.Bytes()
	}
	return req.Header, body, nil
}
