package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// startManagerArgs starts the actionledger binary like startManager, with extra flags.
func startManagerArgs(t *testing.T, kubeconfig string, extra ...string) *manager {
	t.Helper()
	old := managerExtraArgs
	managerExtraArgs = extra
	defer func() { managerExtraArgs = old }()
	return startManager(t, kubeconfig)
}

// term sends SIGTERM to the manager (a graceful stop: the shutdown code runs) and waits up to timeout for it
// to exit; it fails the test if it does not.
func (m *manager) term(t *testing.T, timeout time.Duration) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- m.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("manager exited: %v", err)
		}
	case <-time.After(timeout):
		t.Fatalf("the manager did not exit within %s of SIGTERM:\n%s", timeout, m.log)
	}
}

func seconds(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// Actions of one destination never delay actions of another (DESIGN rule 10): with 24 actions in flight on a
// destination that holds each request 20 s (more than the manager's 16 reconcile workers), an action on
// another destination in another namespace succeeds while all 24 are still in flight.
func TestIsolationBetweenDestinations(t *testing.T) {
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Env.Stop() })
	kubeconfig := env.Kubeconfig(t)

	slow, slowURL := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 20 * time.Second})
	fast, fastURL := envtestutil.DestinationServer(t, destination.Options{})
	nsA, nsB := env.Namespace(t), env.Namespace(t)
	env.CreateDestination(t, nsA, "slow", slowURL, func(s *actionsv1alpha1.DestinationSpec) { s.Timeout = seconds(time.Minute) })
	env.CreateDestination(t, nsB, "fast", fastURL, nil)
	startManagerArgs(t, kubeconfig, "--max-concurrent-reconciles=16")

	const n = 24
	for i := range n {
		env.Create(t, envtestutil.Action(nsA, fmt.Sprintf("slow-%d", i), "slow", "/orders", `{"n":1}`))
	}
	envtestutil.Eventually(t, time.Minute, func() string {
		return fmt.Sprintf("all %d slow requests in flight (have %d)", n, slow.Summary().Requests)
	}, func() bool { return slow.Summary().Requests == n })

	env.Create(t, envtestutil.Action(nsB, "quick", "fast", "/orders", `{"n":2}`))
	env.WaitPhase(t, nsB, "quick", actionsv1alpha1.PhaseSucceeded, 15*time.Second)
	for i := range n {
		if xa := env.Get(t, nsA, fmt.Sprintf("slow-%d", i)); xa.Status.Phase != actionsv1alpha1.PhaseInProgress {
			t.Fatalf("slow-%d is %s when the other destination's action succeeded; want all %d still in flight",
				i, xa.Status.Phase, n)
		}
	}
	if got := fast.Requests(nsB + "/quick"); got != 1 {
		t.Fatalf("fast destination got %d requests, want 1", got)
	}
}

// On SIGTERM the manager stops starting sends, awaits the ones in flight and records their outcomes before
// it exits: every action whose request was in flight is Succeeded after one request.
func TestSIGTERMRecordsSendsInFlight(t *testing.T) {
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Env.Stop() })
	kubeconfig := env.Kubeconfig(t)

	dest, url := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 3 * time.Second})
	ns := env.Namespace(t)
	env.CreateDestination(t, ns, "slow", url, func(s *actionsv1alpha1.DestinationSpec) { s.Timeout = seconds(20 * time.Second) })
	mgr := startManagerArgs(t, kubeconfig, "--shutdown-grace=15s")
	const n = 6
	for i := range n {
		env.Create(t, envtestutil.Action(ns, fmt.Sprintf("a-%d", i), "slow", "/orders", `{"n":1}`))
	}
	envtestutil.Eventually(t, time.Minute, envtestutil.Say("every request in flight"), func() bool { return dest.Summary().Requests == n })
	mgr.term(t, 40*time.Second)

	// No manager runs now: what status shows was written by the one that stopped.
	for i := range n {
		name := fmt.Sprintf("a-%d", i)
		xa := env.Get(t, ns, name)
		if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || xa.Status.Attempts != 1 || xa.Status.Claim != nil {
			t.Errorf("%s after SIGTERM: %s; want Succeeded after 1 attempt, recorded before the exit", name, envtestutil.JSON(xa.Status))
		}
		if got := dest.Requests(ns + "/" + name); got != 1 {
			t.Errorf("%s: %d requests, want 1", name, got)
		}
	}
}

// A send slower than --shutdown-grace is cut at the end of the grace: its claim stays open (the outcome is
// uncertain) and the next manager settles it by DESIGN rule 3 (here the post-check), without a resend.
func TestSIGTERMPastTheGraceLeavesClaimsToRule3(t *testing.T) {
	env, err := envtestutil.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Env.Stop() })
	kubeconfig := env.Kubeconfig(t)

	// The destination commits whatever the client does, 4 s after the request arrived.
	dest, url := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 4 * time.Second})
	ns := env.Namespace(t)
	env.CreateDestination(t, ns, "slow", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Timeout = seconds(6 * time.Second)
		s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{Path: "/effects?key={key}",
			Applied: "response.statusCode == 200", NotApplied: "response.statusCode == 404"}
	})
	mgr := startManagerArgs(t, kubeconfig, "--shutdown-grace=1s")
	const n = 3
	for i := range n {
		env.Create(t, envtestutil.Action(ns, fmt.Sprintf("b-%d", i), "slow", "/orders", `{"n":1}`))
	}
	envtestutil.Eventually(t, time.Minute, envtestutil.Say("every request in flight"), func() bool { return dest.Summary().Requests == n })
	mgr.term(t, 30*time.Second)
	for i := range n {
		if xa := env.Get(t, ns, fmt.Sprintf("b-%d", i)); xa.Status.Claim == nil || xa.Status.Phase.Terminal() {
			t.Errorf("b-%d after a SIGTERM past the grace: %s; want its claim left open", i, envtestutil.JSON(xa.Status))
		}
	}

	startManagerArgs(t, kubeconfig)
	for i := range n {
		name := fmt.Sprintf("b-%d", i)
		xa := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseSucceeded, time.Minute)
		if xa.Status.Attempts != 1 {
			t.Errorf("%s: %d attempts, want 1 (settled by the post-check): %s", name, xa.Status.Attempts, envtestutil.JSON(xa.Status))
		}
		if r, e := dest.Requests(ns+"/"+name), dest.Effects(ns+"/"+name); r != 1 || e != 1 {
			t.Errorf("%s: %d requests, %d effects; want 1 and 1 (no duplicate)", name, r, e)
		}
	}
}
