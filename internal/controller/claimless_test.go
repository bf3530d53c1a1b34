//go:build !unit

package controller_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// versions records every version of the namespace's ExternalActions the API server sends to a watch, by name.
type versions struct {
	mu   sync.Mutex
	seen map[string][]actionsv1alpha1.ExternalActionStatus
}

func watchVersions(t *testing.T, ns string) *versions {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: app.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(context.Background(), &actionsv1alpha1.ExternalActionList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	v := &versions{seen: map[string][]actionsv1alpha1.ExternalActionStatus{}}
	go func() {
		for ev := range w.ResultChan() {
			xa, ok := ev.Object.(*actionsv1alpha1.ExternalAction)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			v.mu.Lock()
			v.seen[xa.Name] = append(v.seen[xa.Name], *xa.Status.DeepCopy())
			v.mu.Unlock()
		}
	}()
	return v
}

// statuses are the distinct statuses seen for name, in order (a metadata-only change repeats the last one).
func (v *versions) statuses(name string) []actionsv1alpha1.ExternalActionStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []actionsv1alpha1.ExternalActionStatus
	for _, st := range v.seen[name] {
		if len(out) == 0 || envtestutil.JSON(out[len(out)-1]) != envtestutil.JSON(st) {
			out = append(out, st)
		}
	}
	return out
}

// With idempotency.claim WhenUnsafe, a repeat-safe first attempt is sent without a claim: the action goes
// from no status to Succeeded in one status write (no InProgress phase, no claim ever stored), the key goes
// downstream once, and the attempt is counted at the outcome. On the same Destination an action whose repeat
// is unsafe (POST to a destination that does not dedup) is still claimed before its send.
func TestClaimlessFirstAttemptIsOneStatusWrite(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 200 * time.Millisecond})
	env.CreateDestination(t, ns, "dedup", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true, Claim: actionsv1alpha1.ClaimWhenUnsafe}
	})
	env.CreateDestination(t, ns, "by-method", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Claim: actionsv1alpha1.ClaimWhenUnsafe}
	})
	seen := watchVersions(t, ns)
	env.StartManager(t, app.Options{})

	put := envtestutil.Action(ns, "put-1", "by-method", "/items/1", `{"v":1}`)
	put.Spec.Request.Method = "PUT" // Idempotent by its method (RFC 9110 section 9.2.2)
	for _, xa := range []*actionsv1alpha1.ExternalAction{
		envtestutil.Action(ns, "charge-1", "dedup", "/charges", `{"amount":1}`),
		put,
		envtestutil.Action(ns, "post-1", "by-method", "/charges", `{"amount":2}`),
	} {
		env.Create(t, xa)
	}
	for name, claimless := range map[string]bool{"charge-1": true, "put-1": true, "post-1": false} {
		xa := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseSucceeded, 30*time.Second)
		if got := srv.Requests(ns + "/" + name); got != 1 {
			t.Errorf("%s: destination received %d requests, want 1", name, got)
		}
		if xa.Status.Attempts != 1 || xa.Status.Claim != nil || xa.Status.Fingerprint == "" || xa.Status.IdempotencyKey != ns+"/"+name {
			t.Errorf("%s: status = %s", name, envtestutil.JSON(xa.Status))
		}
		// The watch may lag behind the read that saw Succeeded: wait until it has delivered that version too.
		envtestutil.Eventually(t, 10*time.Second, envtestutil.Say(name+": the watch sees Succeeded"), func() bool {
			sts := seen.statuses(name)
			return len(sts) > 0 && sts[len(sts)-1].Phase == actionsv1alpha1.PhaseSucceeded
		})
		claims := 0
		sts := seen.statuses(name)
		for _, st := range sts {
			if st.Claim != nil {
				claims++
			}
		}
		if claimless && (claims != 0 || len(sts) != 2) {
			t.Errorf("%s (repeat-safe, claim WhenUnsafe): statuses seen %s; want none, then Succeeded: no claim written",
				name, envtestutil.JSON(sts))
		}
		if !claimless && claims != 1 {
			t.Errorf("%s (repeat unsafe): %d statuses with a claim seen, want 1 (claimed before the send): %s",
				name, claims, envtestutil.JSON(sts))
		}
	}
}

// A manager stopped while an unclaimed send is out, past its shutdown grace, leaves nothing in status; the next
// manager sends again with the same key (repeating is safe: the destination dedups, one effect), and the action
// ends Succeeded with one attempt recorded: nothing is lost, nothing is applied twice.
func TestClaimlessSendCutByAStopIsSentAgain(t *testing.T) {
	ns := env.Namespace(t)
	srv, url := envtestutil.DestinationServer(t, destination.Options{Dedup: true})
	env.CreateDestination(t, ns, "dedup", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true, Claim: actionsv1alpha1.ClaimWhenUnsafe}
	})
	key := ns + "/slow-1"
	// The first request is applied and then held for longer than the shutdown grace: its answer never arrives.
	srv.Script(key, destination.Step{Delay: 3 * time.Second})
	stop := env.StartManager(t, app.Options{ShutdownGrace: 200 * time.Millisecond})
	env.Create(t, envtestutil.Action(ns, "slow-1", "dedup", "/charges", `{"amount":3}`))
	envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the first request to arrive"), func() bool { return srv.Requests(key) >= 1 })
	stop()
	if st := env.Get(t, ns, "slow-1").Status; st.Attempts != 0 || st.Claim != nil || st.Phase != "" {
		t.Fatalf("after the stop, status = %s; want nothing written (the send was cut)", envtestutil.JSON(st))
	}
	env.StartManager(t, app.Options{})
	xa := env.WaitPhase(t, ns, "slow-1", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	if got, effects := srv.Requests(key), srv.Effects(key); got < 2 || effects != 1 {
		t.Errorf("requests %d, effects %d; want the key sent again (>= 2) and applied once", got, effects)
	}
	// Attempts are counted at the outcome write: every request but the cut one has its attempt recorded.
	if got := srv.Requests(key); int(xa.Status.Attempts) != got-1 {
		t.Errorf("attempts = %d with %d requests; want one request (the cut send) not counted", xa.Status.Attempts, got)
	}
}
