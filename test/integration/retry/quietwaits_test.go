package retry_test

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// The waits the manager handles itself are not errors: an action whose destination is missing, one whose
// destination's address the egress policy denies, one waiting for its subject and actions waiting for the
// rate limit each requeue without returning an error to controller-runtime, so the manager's log has no ERROR
// line and no stack trace while they wait; each shows its reason in its conditions instead.
func TestExpectedWaitsLogNoErrors(t *testing.T) {
	ns := env.Namespace(t)
	_, url := envtestutil.DestinationServer(t, destination.Options{})
	_, slowURL := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 10 * time.Second})
	env.CreateDestination(t, ns, "limited", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.RateLimit = &actionsv1alpha1.RateLimit{RequestsPerSecond: 1, Burst: ptr(int32(1))}
	})
	env.CreateDestination(t, ns, "slow", slowURL, nil)
	env.CreateDestination(t, ns, "denied", "http://127.0.0.2:9", nil) // outside the tests' 127.0.0.1/32
	out := &envtestutil.SyncBuffer{}
	env.StartManager(t, app.Options{Logger: zap.New(zap.WriteTo(out), zap.JSONEncoder(), zap.Level(zapcore.InfoLevel),
		zap.StacktraceLevel(zapcore.ErrorLevel))})

	env.Create(t, envtestutil.Action(ns, "no-destination", "missing", "/orders", `{"n":0}`))
	env.Create(t, envtestutil.Action(ns, "egress", "denied", "/orders", `{"n":0}`))
	holder := envtestutil.Action(ns, "holder", "slow", "/orders", `{"n":1}`)
	holder.Spec.Subject = "order/19"
	env.Create(t, holder)
	env.WaitPhase(t, ns, "holder", actionsv1alpha1.PhaseInProgress, 30*time.Second)
	waiter := envtestutil.Action(ns, "waiter", "slow", "/orders", `{"n":2}`)
	waiter.Spec.Subject = "order/19"
	env.Create(t, waiter)
	for i := range 4 {
		env.Create(t, envtestutil.Action(ns, "limited-"+string(rune('a'+i)), "limited", "/orders", `{"n":3}`))
	}
	reasons := map[string]string{"no-destination": actionsv1alpha1.ReasonDestinationNotReady,
		"egress": actionsv1alpha1.ReasonEgressDenied, "waiter": actionsv1alpha1.ReasonWaitingForSubject,
		"limited-d": actionsv1alpha1.ReasonRateLimited}
	for name, reason := range reasons {
		env.WaitFor(t, ns, name, 20*time.Second, "reason "+reason, func(xa *actionsv1alpha1.ExternalAction) bool {
			for _, c := range xa.Status.Conditions {
				if c.Reason == reason {
					return true
				}
			}
			return false
		})
	}
	// The rate-limited ones requeue for about 3 s more before the last is sent.
	env.WaitPhase(t, ns, "limited-d", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	log := out.String()
	if !strings.Contains(log, `"msg":"phase changed"`) {
		t.Fatalf("the manager's log has no reconcile lines; is the logger wired?\n%s", log)
	}
	if errs, traces := strings.Count(log, `"level":"error"`), strings.Count(log, `"stacktrace"`); errs != 0 || traces != 0 {
		t.Errorf("%d ERROR lines and %d stack traces in the manager's log during expected waits, want 0:\n%s", errs, traces, log)
	}
}
