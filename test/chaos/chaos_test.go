package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/shard"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// env is the real control plane (kube-apiserver + etcd) of this package.
var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

// params size one chaos run.
type params struct {
	// actions per mode.
	actions int
	// chaosFor is how long managers are killed and restarted; actions are created during its first 60%.
	chaosFor time.Duration
	// killEvery is the range of the pause between two chaos events.
	killEveryMin, killEveryMax time.Duration
	// maxEvents bounds the chaos events whatever the clock says.
	maxEvents int
	// settle bounds the final wait for every action to reach a terminal phase.
	settle time.Duration
}

func chaosParams() params {
	if os.Getenv("CHAOS_LONG") != "" {
		return params{actions: 500, chaosFor: 4 * time.Minute, killEveryMin: time.Second, killEveryMax: 4 * time.Second,
			maxEvents: 400, settle: 5 * time.Minute}
	}
	return params{actions: 60, chaosFor: 30 * time.Second, killEveryMin: time.Second, killEveryMax: 3 * time.Second,
		maxEvents: 40, settle: 60 * time.Second}
}

// TestChaos runs the three modes (dedup, no-dedup, and claimless: dedup without claims on first attempts) at once against the same crashing managers, then checks every
// key: never applied twice, never lost, and (no-dedup) each phase consistent with the destination's count.
func TestChaos(t *testing.T) {
	p := chaosParams()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		_, _ = fmt.Sscan(s, &seed)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	t.Logf("chaos seed=%d (set CHAOS_SEED to repeat the schedule of faults; process timing still varies)", seed)

	fl := newFleet(t)
	tox := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	worlds := []*world{
		newWorld(t, tox, "dedup", true, "", p.actions),
		newWorld(t, tox, "no-dedup", false, "", p.actions),
		// The claimless path: a deduplicating destination with idempotency.claim WhenUnsafe, so first attempts
		// go without a claim write (create, send, one outcome write) while managers are killed mid-send.
		newWorld(t, tox, "claimless", true, actionsv1alpha1.ClaimWhenUnsafe, p.actions),
	}
	t.Cleanup(fl.stopAll) // registered last: runs first, no manager process outlives the test

	fl.start()
	// Two shards beside the managers that watch everything: each action is labeled for one of them and relabeled
	// to the other during the run, so up to three managers with overlapping and moving views act on it.
	for _, s := range chaosShards {
		fl.startShard(shardSelector(s))
	}
	start := time.Now()

	// Create the actions of every mode, interleaved, spread over the first 60% of the chaos period.
	// The creator stops early if the test ends (a Fatal) before it is done.
	var wg sync.WaitGroup
	stopCreating := make(chan struct{})
	t.Cleanup(func() {
		close(stopCreating)
		wg.Wait()
	})
	wg.Go(func() {
		createFor := p.chaosFor * 6 / 10
		for i := range p.actions {
			select {
			case <-stopCreating:
				return
			default:
			}
			for _, w := range worlds {
				w.create(t, i)
			}
			if d := time.Until(start.Add(createFor * time.Duration(i+1) / time.Duration(p.actions))); d > 0 {
				time.Sleep(d)
			}
		}
	})

	// Relabel: every 100-300 ms one created action moves to the other shard, during the whole chaos period.
	var relabels atomic.Int64
	relabelRng := rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
	wg.Go(func() {
		for time.Since(start) < p.chaosFor {
			select {
			case <-stopCreating:
				return
			case <-time.After(100*time.Millisecond + time.Duration(relabelRng.Int64N(int64(200*time.Millisecond)))):
			}
			w := worlds[relabelRng.IntN(len(worlds))]
			if w.relabel(t, relabelRng) {
				relabels.Add(1)
			}
		}
	})

	// Chaos: SIGKILL or SIGTERM a manager at a random moment and restart it; sometimes run a second one beside it,
	// sometimes SIGKILL a shard and restart it.
	for events := 0; events < p.maxEvents && time.Since(start) < p.chaosFor; events++ {
		time.Sleep(p.killEveryMin + time.Duration(rng.Int64N(int64(p.killEveryMax-p.killEveryMin))))
		if shards := fl.shards(); len(shards) > 0 && rng.Float64() < 0.15 {
			s := shards[rng.IntN(len(shards))]
			fl.kill(s)
			fl.startShard(s.selector)
			continue
		}
		switch running := fl.running(); {
		case len(running) == 0:
			fl.start()
		case len(running) >= 2:
			fl.kill(running[rng.IntN(len(running))])
		case rng.Float64() < 0.25:
			fl.start() // two managers at once, leader election off
		case rng.Float64() < 0.35:
			fl.term(running[0]) // graceful: in-flight sends are recorded, queued ones recorded as not sent
			fl.start()
		default:
			fl.kill(running[0])
			if rng.Float64() < 0.5 {
				time.Sleep(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
			}
			fl.start()
		}
	}
	wg.Wait()
	if len(fl.running()) == 0 {
		fl.start()
	}

	// Bounded wait for every action to reach a terminal phase.
	settleBy := time.Now().Add(p.settle)
	for {
		open := 0
		for _, w := range worlds {
			open += len(w.open(t))
		}
		if open == 0 || time.Now().After(settleBy) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	kills := fl.killCount()
	shardChanges := fl.shardPhaseChanges()
	t.Logf("chaos: %d SIGKILLs, %d SIGTERMs, %d relabels between shards, %d phase changes written by shards",
		kills, fl.termCount(), relabels.Load(), shardChanges)
	if relabels.Load() == 0 || shardChanges == 0 {
		t.Errorf("relabels=%d, phase changes by shards=%d: the shards did not take part", relabels.Load(), shardChanges)
	}
	kills += fl.termCount()
	for _, w := range worlds {
		w.check(t, kills)
	}
}

// world is one mode: a namespace, its recording destination behind a toxiproxy, its Destinations and actions.
type world struct {
	mode  string
	dedup bool
	claim actionsv1alpha1.ClaimPolicy
	ns    string
	srv   *destination.Server
	total int
	names []string
	mu    sync.Mutex
}

func newWorld(t *testing.T, tox *toxiproxy.ApiServer, mode string, dedup bool, claim actionsv1alpha1.ClaimPolicy, n int) *world {
	t.Helper()
	w := &world{mode: mode, dedup: dedup, claim: claim, total: n}
	w.ns = fmt.Sprintf("chaos-%s-%d", mode, time.Now().UnixNano()%1_000_000)
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}); err != nil {
		t.Fatalf("namespace: %v", err)
	}
	w.srv = destination.New(destination.Options{Dedup: dedup, CommitDelay: 80 * time.Millisecond})
	ts := httptest.NewServer(w.srv) // loopback
	t.Cleanup(ts.Close)

	proxy := toxiproxy.NewProxy(tox, mode, "127.0.0.1:0", ts.Listener.Addr().String())
	if err := tox.Collection.Add(proxy, true); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(func() { _ = tox.Collection.Remove(mode) })
	// Downstream toxics act on the answer, i.e. after the request was written and (normally) applied: the
	// uncertain outcomes of DESIGN rule 4. Toxicity is drawn per connection.
	for _, tx := range []string{
		`{"name":"latency","type":"latency","stream":"downstream","toxicity":0.3,"attributes":{"latency":150,"jitter":100}}`,
		`{"name":"reset","type":"reset_peer","stream":"downstream","toxicity":0.15,"attributes":{"timeout":0}}`,
		`{"name":"timeout","type":"timeout","stream":"downstream","toxicity":0.06,"attributes":{"timeout":0}}`,
	} {
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(tx)); err != nil {
			t.Fatalf("toxic %s: %v", tx, err)
		}
	}
	url := "http://" + proxy.Listen

	policy := func(s *actionsv1alpha1.DestinationSpec) {
		s.Timeout = &metav1.Duration{Duration: 2 * time.Second}
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{
			MaxAttempts:    new(int32(10)),
			InitialBackoff: &metav1.Duration{Duration: 200 * time.Millisecond},
			MaxBackoff:     &metav1.Duration{Duration: 2 * time.Second},
			Deadline:       &metav1.Duration{Duration: 30 * time.Minute},
		}
	}
	if dedup {
		env.CreateDestination(t, w.ns, "dest", url, func(s *actionsv1alpha1.DestinationSpec) {
			policy(s)
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: true, Claim: claim}
		})
	} else {
		env.CreateDestination(t, w.ns, "checked", url, func(s *actionsv1alpha1.DestinationSpec) {
			policy(s)
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: false}
			s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{
				Method: "GET", Path: "/effects?key={key}",
				Applied: "response.statusCode == 200", NotApplied: "response.statusCode == 404",
			}
		})
		env.CreateDestination(t, w.ns, "unchecked", url, func(s *actionsv1alpha1.DestinationSpec) {
			policy(s)
			s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: false}
		})
	}
	return w
}

// create scripts the destination for action i (a subset gets 429/503 first, a subset a reset after the
// request was read, with or without the effect applied, a few a business rejection) and creates it.
func (w *world) create(t *testing.T, i int) {
	name := fmt.Sprintf("a-%04d", i)
	key := w.ns + "/" + name
	switch {
	case i%20 == 9 && w.claim == actionsv1alpha1.ClaimWhenUnsafe:
		// A claimless destination must answer every send of a key alike (concepts.md "Sends without a claim"):
		// its rejection is stored and replayed, so two managers' overlapping sends both see it.
		declined := destination.Step{Status: 422, Body: `{"code":"card_declined"}`}
		w.srv.Script(key, declined, declined, declined, declined, declined, declined, declined, declined)
	case i%20 == 9:
		w.srv.Script(key, destination.Step{Status: 422, Body: `{"code":"card_declined"}`})
	case i%10 == 3:
		w.srv.Script(key, destination.Step{Status: 429, Header: map[string]string{"Retry-After": "1"}, Body: `{"code":"slow_down"}`})
	case i%10 == 6:
		w.srv.Script(key, destination.Step{Status: 503}, destination.Step{Status: 503})
	case i%10 == 7:
		// Applied, then the connection is reset before the answer: uncertain, and in fact applied.
		w.srv.Script(key, destination.Step{CloseConn: true, Apply: true, Delay: 50 * time.Millisecond})
	case i%10 == 8:
		// Reset after the request was read, not applied: uncertain, and in fact not applied.
		w.srv.Script(key, destination.Step{CloseConn: true})
	}
	dest := "dest"
	if !w.dedup {
		dest = "checked"
		if i%2 == 1 {
			dest = "unchecked"
		}
	}
	xa := envtestutil.Action(w.ns, name, dest, "/charges", fmt.Sprintf(`{"amount":%d,"currency":"EUR"}`, 100+i))
	xa.Labels = map[string]string{shard.LabelKey: chaosShards[i%len(chaosShards)]}
	var err error
	for range 5 {
		if err = env.Client.Create(context.Background(), xa.DeepCopy()); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("creating %s: %v", key, err)
		return
	}
	w.mu.Lock()
	w.names = append(w.names, name)
	w.mu.Unlock()
}

// chaosShards are the shard label values; shard s runs with --watch-label-selector=shardSelector(s).
var chaosShards = []string{"shard1", "shard2"}

func shardSelector(s string) string { return shard.LabelKey + " in (" + s + ")" }

// relabel moves one created action to the other shard (a merge patch of its label: no resourceVersion, so it
// lands between the managers' writes and makes their next claim on the older copy conflict).
func (w *world) relabel(t *testing.T, rng *rand.Rand) bool {
	w.mu.Lock()
	if len(w.names) == 0 {
		w.mu.Unlock()
		return false
	}
	name := w.names[rng.IntN(len(w.names))]
	w.mu.Unlock()
	xa := &actionsv1alpha1.ExternalAction{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, xa); err != nil {
		t.Logf("relabel: reading %s/%s: %v", w.ns, name, err)
		return false
	}
	to := chaosShards[0]
	if xa.Labels[shard.LabelKey] == to {
		to = chaosShards[1]
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, shard.LabelKey, to))
	if err := env.Client.Patch(context.Background(), xa, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Logf("relabel: patching %s/%s: %v", w.ns, name, err)
		return false
	}
	return true
}

func (w *world) list(t *testing.T) []actionsv1alpha1.ExternalAction {
	list := &actionsv1alpha1.ExternalActionList{}
	if err := env.Client.List(context.Background(), list, client.InNamespace(w.ns)); err != nil {
		t.Logf("listing actions in %s: %v", w.ns, err)
		return nil
	}
	return list.Items
}

// open returns the names of actions not yet in a terminal phase (or not listed at all).
func (w *world) open(t *testing.T) []string {
	seen := map[string]bool{}
	var out []string
	for _, xa := range w.list(t) {
		seen[xa.Name] = true
		if !finished(xa.Status.Phase) {
			out = append(out, xa.Name)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.names {
		if !seen[n] {
			out = append(out, n)
		}
	}
	return out
}

// finished: the phases an action may end in under chaos (Conflict would mean the controller broke a key).
func finished(p actionsv1alpha1.Phase) bool {
	switch p {
	case actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.PhaseFailed, actionsv1alpha1.PhaseExhausted, actionsv1alpha1.PhaseOutcomeUnknown:
		return true
	}
	return false
}

// check prints the result line and asserts: no duplicates, nothing lost, phases consistent with the effects.
func (w *world) check(t *testing.T, kills int) {
	t.Helper()
	items := w.list(t)
	phases := map[string]int{}
	byName := map[string]actionsv1alpha1.ExternalAction{}
	for _, xa := range items {
		phases[string(xa.Status.Phase)]++
		byName[xa.Name] = xa
	}
	lost := w.open(t)
	sum := w.srv.Summary()
	keys := make([]string, 0, len(phases))
	for k := range phases {
		if k == "" {
			keys = append(keys, "None")
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	ph := make([]string, 0, len(keys))
	for _, k := range keys {
		n := phases[k]
		if k == "None" {
			n = phases[""]
		}
		ph = append(ph, fmt.Sprintf("%s:%d", k, n))
	}
	line := fmt.Sprintf("chaos mode=%s actions=%d kills=%d phases={%s} applied=%d duplicates=%d lost=%d unknown=%d",
		w.mode, len(w.names), kills, strings.Join(ph, ","), sum.Applied, sum.Duplicates, len(lost), phases[string(actionsv1alpha1.PhaseOutcomeUnknown)])
	fmt.Println(line)
	// How hard the run hit the uncertain paths (DESIGN rules 3 and 4), so a quiet run is visible as such.
	uncertain, expired, postChecked := 0, 0, 0
	for _, xa := range items {
		for _, h := range xa.Status.AttemptHistory {
			switch {
			case h.ErrorClass == "ClaimExpired":
				expired++
			case h.Result == "Uncertain":
				uncertain++
			case h.Result == "Applied" || h.Result == "NotApplied":
				postChecked++
			}
		}
	}
	// Sends beyond the attempts recorded: what a manager killed between a send and its record sent again (with
	// a claim, the expired claim is counted as an attempt; without one, in claimless mode, it is not).
	resent := 0
	for _, xa := range items {
		if n := w.srv.Requests(xa.Namespace+"/"+xa.Name) - int(xa.Status.Attempts); n > 0 && w.dedup {
			resent += n
		}
	}
	t.Logf("mode %s: requests=%d replayed=%d uncertain-attempts=%d expired-claims=%d post-check-verdicts=%d sends-beyond-attempts=%d",
		w.mode, sum.Requests, sum.Replayed, uncertain, expired, postChecked, resent)

	if len(w.names) != w.total {
		t.Errorf("mode %s: created %d actions, want %d", w.mode, len(w.names), w.total)
	}
	if sum.Duplicates != 0 {
		for _, k := range sum.DuplicateKeys {
			name := k[strings.LastIndex(k, "/")+1:]
			t.Errorf("mode %s: key %s applied %d times; status %s; requests %s", w.mode, k, w.srv.Effects(k),
				envtestutil.JSON(byName[name].Status), requestsOf(w.srv, k))
		}
	}
	if len(lost) != 0 {
		slices.Sort(lost)
		for i, n := range lost {
			if i == 10 {
				t.Errorf("... and %d more", len(lost)-10)
				break
			}
			t.Errorf("mode %s: action %s did not finish: status %s", w.mode, n, envtestutil.JSON(byName[n].Status))
		}
	}
	// Every phase must agree with what the destination saw.
	bad := 0
	for _, xa := range items {
		key := w.ns + "/" + xa.Name
		n := w.srv.Effects(key)
		var why string
		switch xa.Status.Phase {
		case actionsv1alpha1.PhaseSucceeded:
			if n != 1 {
				why = "Succeeded but applied " + fmt.Sprint(n) + " times"
			}
		case actionsv1alpha1.PhaseFailed:
			if n != 0 {
				why = "Failed but applied " + fmt.Sprint(n) + " times"
			}
		case actionsv1alpha1.PhaseExhausted:
			// Without dedup an action is retried only after a proof that nothing was applied.
			if !w.dedup && n != 0 {
				why = "Exhausted but applied " + fmt.Sprint(n) + " times"
			}
		case actionsv1alpha1.PhaseOutcomeUnknown:
			if w.dedup {
				why = "OutcomeUnknown although the destination dedups (repeating is safe)"
			}
			// Without dedup: allowed for uncertain attempts, applied 0 or 1 times (2+ is a duplicate, above).
		}
		if why != "" {
			bad++
			if bad <= 10 {
				t.Errorf("mode %s: %s: %s; status %s; requests %s", w.mode, key, why, envtestutil.JSON(xa.Status), requestsOf(w.srv, key))
			}
		}
	}
}

func requestsOf(srv *destination.Server, key string) string {
	log := srv.RequestLog(key)
	parts := make([]string, 0, len(log))
	for _, r := range log {
		parts = append(parts, fmt.Sprintf("%s@%s status=%d applied=%t replayed=%t", r.Method, r.At.Format("15:04:05.000"), r.Status, r.Applied, r.Replayed))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

//go:fix inline
