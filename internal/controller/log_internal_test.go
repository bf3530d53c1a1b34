package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/limiter"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/internal/send"
)

type fakeRecorder struct{ *events.FakeRecorder }

// Recording an outcome logs one info line for the attempt (key, attempt, destination, result, status code,
// duration) and one for the phase change, and never the response's body or header values.
func TestRecordLogsOutcomeAndPhaseChange(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := actionsv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	started := metav1.NewTime(now.Add(-2 * time.Second))
	xa := &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "invoice-7", Generation: 1},
		Spec:       actionsv1alpha1.ExternalActionSpec{DestinationRef: actionsv1alpha1.DestinationReference{Name: "payments"}},
		Status: actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseInProgress, Attempts: 1,
			Claim: &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "h", StartedAt: started, ExpiresAt: metav1.NewTime(now.Add(time.Minute))}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(xa).WithStatusSubresource(xa).Build()
	r := &ExternalActionReconciler{Client: c, APIReader: c, Scheme: scheme, Recorder: fakeRecorder{events.NewFakeRecorder(10)},
		Clock: clock.RealClock{}, Limiter: limiter.NewRegistry(), Exprs: expr.NewCache(16),
		Dispatcher: &InlineDispatcher{Clock: clock.RealClock{}}}
	var lines []string
	// The reconcile's logger names the action (the controller's LogConstructor, actionLogger, as controller-runtime
	// calls it for a request); each line must name it once.
	base := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	ctx := log.IntoContext(context.Background(), actionLogger(base)(&reconcile.Request{NamespacedName: client.ObjectKeyFromObject(xa)}))
	o := ledger.Outcome{Class: retry.ClassSuccess, StatusCode: 201, FinishedAt: now,
		Response: &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"token":"s3cr3t-body"}`,
			Headers: map[string]string{"Location": "/charges/s3cr3t-header"}}}
	cur := xa.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(xa), cur); err != nil {
		t.Fatal(err)
	}
	r.once.Do(r.build)
	if _, err := r.record(ctx, cur, &send.Result{Attempt: 1, Outcome: o, Env: ledger.Env{Now: now, Generation: 1, Retention: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{`"msg"="attempt finished"`, `"externalaction"={"name"="invoice-7" "namespace"="shop"}`,
		`"namespace"="shop"`, `"name"="invoice-7"`, `"attempt"=1`, `"destination"="Destination/shop/payments"`,
		`"result"="Success"`, `"statusCode"=201`, `"duration"="2s"`,
		`"msg"="phase changed"`, `"from"="InProgress"`, `"to"="Succeeded"`, `"reason"="Succeeded"`} {
		if !strings.Contains(all, want) {
			t.Errorf("logs lack %s:\n%s", want, all)
		}
	}
	for _, l := range lines {
		if n := strings.Count(l, `"externalaction"=`); n != 1 {
			t.Errorf("a log line names the action %d times, want once (a JSON key twice):\n%s", n, l)
		}
	}
	if strings.Contains(all, "s3cr3t") {
		t.Errorf("logs carry a response body or header value:\n%s", all)
	}
}
