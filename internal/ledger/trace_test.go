package ledger

import (
	"testing"
	"time"

	"github.com/actionledger/actionledger/internal/retry"
)

// A traced attempt's trace id goes into its history entry, and the entry is kept (Traced) even when the attempt
// is the only one and succeeded.
func TestRecordKeepsTheTraceID(t *testing.T) {
	env := testEnv()
	st := claimed(env, 1)
	o := Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: t0.Add(time.Second), TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	step, ok := Record(st, 1, o, env)
	if !ok || !Traced(o) {
		t.Fatalf("Record: ok=%v", ok)
	}
	if h := step.Status.AttemptHistory; len(h) != 1 || h[0].TraceID != o.TraceID {
		t.Errorf("history %+v, want the one attempt with its trace id", h)
	}
	if Traced(Outcome{Class: retry.ClassSuccess}) {
		t.Error("an attempt without a trace id reads as traced")
	}
}
