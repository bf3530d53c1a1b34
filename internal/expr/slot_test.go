package expr

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// An evaluation waits at most SlotWait for a slot; not getting one is Unfinished (it decides nothing, DESIGN rule
// 12), and so are its deadline and cancellation, while an expression's own runtime error and the cost limit are
// not. The evaluation's own EvalTimeout starts once it has a slot: a wait behind other evaluations does not eat it.
func TestSlotWaitIsUnfinishedAndApartFromTheEvaluation(t *testing.T) {
	p, err := Compile(`response.statusCode == 201`)
	if err != nil {
		t.Fatal(err)
	}
	in := Response{StatusCode: 201, Header: http.Header{}}
	release := Occupy()
	_, err = p.Eval(in)
	release()
	if !Unfinished(err) || NeverFinishes(err) {
		t.Fatalf("no slot: err %v, Unfinished %v; want an unfinished evaluation", err, Unfinished(err))
	}

	// A slot freed within SlotWait: the evaluation runs in full.
	release = Occupy()
	go func() { time.Sleep(SlotWait / 4); release() }()
	if ok, err := p.Eval(in); err != nil || !ok {
		t.Fatalf("slot freed in time: %v, %v", ok, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release = Occupy()
	_, err = p.EvalContext(ctx, in)
	release()
	if !Unfinished(err) {
		t.Errorf("cancelled while waiting for a slot: err %v is not Unfinished", err)
	}
	bad, err := Compile(`response.body.missing == 1`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Eval(in); err == nil || Unfinished(err) || NeverFinishes(err) {
		t.Errorf("a missing key: err %v; want a finished evaluation's error", err)
	}
	for _, e := range []error{errors.New("plain"), nil, &EvalError{Kind: kindCostLimit}} {
		if Unfinished(e) {
			t.Errorf("Unfinished(%v) = true", e)
		}
	}
	if !NeverFinishes(&EvalError{Kind: kindCostLimit}) {
		t.Error("the cost limit must never finish")
	}
}
