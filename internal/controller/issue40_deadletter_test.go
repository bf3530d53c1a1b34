//go:build !unit

package controller_test

import (
	"encoding/json"
	"testing"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/deadletter"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// Issue 40 row 8: team-a's own Destination has keyFormat team-b/{name}, so its action's key is team-b's; it
// dead-letters to a shared ClusterDestination sink. The record the sink receives says the sink's key for the
// action in data.key (team-a/pay-1, its CloudEvent id without /dead-letter), never the forged team-b/pay-1,
// which is only in actionKey next to the record's namespace.
func TestDeadLetterRecordDataKeyIsTheSinks(t *testing.T) {
	sink, sinkURL := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	cdName := "dl-data-key-" + env.Namespace(t)
	clusterSink(t, cdName, sinkURL, nil)
	env.StartManager(t, app.Options{})
	teamA, teamB := env.Namespace(t), env.Namespace(t)
	env.CreateDestination(t, teamA, "pay", rejecting(t), func(s *actionsv1alpha1.DestinationSpec) {
		deadLettering(actionsv1alpha1.DestinationReference{Kind: "ClusterDestination", Name: cdName})(s)
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{KeyFormat: teamB + "/{name}"}
	})
	env.Create(t, envtestutil.Action(teamA, "pay-1", "pay", "/payments", `{"amount":999}`))
	xa := deadLetterState(t, teamA, "pay-1", actionsv1alpha1.DeadLetterDelivered)
	if xa.Status.IdempotencyKey != teamB+"/pay-1" {
		t.Fatalf("the action's key is %q, want %q (its own keyFormat)", xa.Status.IdempotencyKey, teamB+"/pay-1")
	}
	id := teamA + "/pay-1" + deadletter.KeySuffix
	log := sink.RequestLog(id)
	if len(log) != 1 {
		t.Fatalf("the sink got %d request(s) under %s, want 1", len(log), id)
	}
	var rec map[string]any
	if err := json.Unmarshal(log[0].Body, &rec); err != nil {
		t.Fatalf("the record is not JSON: %v\n%s", err, log[0].Body)
	}
	if rec["key"] != teamA+"/pay-1" || rec["actionKey"] != teamB+"/pay-1" || rec["namespace"] != teamA {
		t.Errorf("record key %v, actionKey %v, namespace %v; want %s/pay-1 (the sink's), %s/pay-1 (the action's own), %s",
			rec["key"], rec["actionKey"], rec["namespace"], teamA, teamB, teamA)
	}
}
