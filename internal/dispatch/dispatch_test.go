package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// wait bounds every wait for something that must happen.
const wait = 10 * time.Second

// collector receives completions.
type collector struct {
	ch chan Completion[int]
}

func newCollector() *collector { return &collector{ch: make(chan Completion[int], 4096)} }

func (c *collector) deliver(x Completion[int]) { c.ch <- x }

// next returns the next completion, failing the test after wait.
func (c *collector) next(t *testing.T) Completion[int] {
	t.Helper()
	select {
	case x := <-c.ch:
		return x
	case <-time.After(wait):
		t.Fatal("no completion within", wait)
		return Completion[int]{}
	}
}

// take returns the next n completions by key.
func (c *collector) take(t *testing.T, n int) map[types.NamespacedName]Completion[int] {
	t.Helper()
	out := map[types.NamespacedName]Completion[int]{}
	for range n {
		x := c.next(t)
		out[x.Key] = x
	}
	return out
}

// gauge measures concurrency: in returns the count after entering, and max is the largest seen.
type gauge struct{ cur, peak atomic.Int64 }

func (g *gauge) in() {
	n := g.cur.Add(1)
	for {
		m := g.peak.Load()
		if n <= m || g.peak.CompareAndSwap(m, n) {
			return
		}
	}
}
func (g *gauge) out() { g.cur.Add(-1) }

// blocker is a Run that signals started, then waits for release (or ctx) and returns v.
type blocker struct {
	started chan types.NamespacedName
	release chan struct{}
	g       *gauge
}

func newBlocker(n int) *blocker {
	return &blocker{started: make(chan types.NamespacedName, n), release: make(chan struct{}), g: &gauge{}}
}

func (b *blocker) run(key types.NamespacedName, v int) func(ctx context.Context) int {
	return func(ctx context.Context) int {
		b.g.in()
		defer b.g.out()
		b.started <- key
		select {
		case <-b.release:
		case <-ctx.Done():
		}
		return v
	}
}

// awaitStarted waits for n starts and returns their keys in order.
func (b *blocker) awaitStarted(t *testing.T, n int) []types.NamespacedName {
	t.Helper()
	var keys []types.NamespacedName
	for range n {
		select {
		case k := <-b.started:
			keys = append(keys, k)
		case <-time.After(wait):
			t.Fatalf("only %d of %d jobs started within %s", len(keys), n, wait)
		}
	}
	return keys
}

func key(ns string, i int) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("a%d", i)}
}

func newDispatcher(t *testing.T, opts Options[int]) *Dispatcher[int] {
	t.Helper()
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mkJob(dest string, k types.NamespacedName, limit int, run func(context.Context) int) Job[int] {
	return Job[int]{Destination: dest, Key: k, Attempt: 1, MaxInFlight: limit, Deadline: time.Now().Add(time.Hour), Run: run}
}

func mustSubmit(t *testing.T, d *Dispatcher[int], j Job[int]) {
	t.Helper()
	if err := d.Submit(j); err != nil {
		t.Fatalf("Submit(%s): %v", j.Key, err)
	}
}

// eventually polls cond until it holds (never to show that something does not happen). A local copy of
// envtestutil.Eventually: that package imports the controller, which will import this one.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not true within %s: %s", wait, what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPerDestinationLimitIsNeverExceeded(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver})
	const dest, limit, n = "Destination/ns/limit", 4, 40
	b := newBlocker(n)
	for i := range n {
		k := key(fmt.Sprintf("ns%d", i%3), i)
		mustSubmit(t, d, mkJob(dest, k, limit, b.run(k, i)))
	}
	b.awaitStarted(t, limit)
	if got, q := d.InFlight(dest), d.Queued(dest); got != limit || q != n-limit {
		t.Fatalf("InFlight, Queued = %d, %d; want %d, %d", got, q, limit, n-limit)
	}
	close(b.release)
	got := c.take(t, n)
	for i := range n {
		x := got[key(fmt.Sprintf("ns%d", i%3), i)]
		if !x.Started || x.Err != nil || x.Result != i {
			t.Fatalf("completion %d = %+v; want started with result %d", i, x, i)
		}
	}
	if p := b.g.peak.Load(); p != limit {
		t.Fatalf("peak concurrency %d; want exactly the limit %d", p, limit)
	}
	eventually(t, "destination forgotten", func() bool { return d.InFlight(dest) == 0 && d.Queued(dest) == 0 })
}

func TestDefaultAndClampedLimits(t *testing.T) {
	d := newDispatcher(t, Options[int]{Deliver: func(Completion[int]) {}, MaxInFlight: 8})
	if got := d.clampLimit(0); got != 8 {
		t.Fatalf("default limit under a global limit of 8 = %d; want 8", got)
	}
	d2 := newDispatcher(t, Options[int]{Deliver: func(Completion[int]) {}})
	for in, want := range map[int]int{0: DefaultMaxInFlight, -3: DefaultMaxInFlight, 5: 5, 5000: MaxMaxInFlight} {
		if got := d2.clampLimit(in); got != want {
			t.Errorf("clampLimit(%d) = %d; want %d", in, got, want)
		}
	}
}

// A destination whose every request hangs never delays another destination's job.
func TestSlowDestinationDoesNotDelayAnother(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver})
	const slow, fast = "Destination/tenant-a/slow", "Destination/tenant-b/fast"
	b := newBlocker(64)
	for i := range 34 { // 24 in flight, 10 queued behind them
		k := key("tenant-a", i)
		mustSubmit(t, d, mkJob(slow, k, 24, b.run(k, i)))
	}
	b.awaitStarted(t, 24)
	start := time.Now()
	k := key("tenant-b", 0)
	mustSubmit(t, d, mkJob(fast, k, 0, func(context.Context) int { return 7 }))
	x := c.next(t)
	if x.Key != k || !x.Started || x.Result != 7 {
		t.Fatalf("first completion = %+v; want the fast destination's job", x)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("fast job took %s", el)
	}
	if got := d.InFlight(slow); got != 24 {
		t.Fatalf("slow destination in flight = %d; want still 24", got)
	}
	close(b.release)
	c.take(t, 34)
}

// One namespace's backlog of 1,000 jobs delays another namespace's single job by at most one send.
func TestFairAcrossNamespaces(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver})
	const dest = "ClusterDestination/shared"
	var mu sync.Mutex
	var order []string
	record := func(k types.NamespacedName) func(context.Context) int {
		return func(context.Context) int {
			mu.Lock()
			order = append(order, k.Namespace)
			mu.Unlock()
			return 0
		}
	}
	b := newBlocker(1)
	hold := key("z", 0)
	mustSubmit(t, d, mkJob(dest, hold, 1, b.run(hold, 0)))
	b.awaitStarted(t, 1)
	for i := range 1000 {
		k := key("big", i)
		mustSubmit(t, d, mkJob(dest, k, 1, record(k)))
	}
	small := key("small", 0)
	mustSubmit(t, d, mkJob(dest, small, 1, record(small)))
	close(b.release)
	c.take(t, 1002)
	if i := indexOf(order, "small"); i < 0 || i > 1 {
		t.Fatalf("the single job of namespace small ran at position %d of %d; want 0 or 1", i, len(order))
	}

	// Three namespaces with queued jobs are served in turn, FIFO inside each.
	order = nil
	b = newBlocker(1)
	hold = key("z", 1)
	mustSubmit(t, d, mkJob(dest, hold, 1, b.run(hold, 0)))
	b.awaitStarted(t, 1)
	for i := range 3 {
		for _, ns := range []string{"a", "b", "c"} {
			k := key(ns, i)
			mustSubmit(t, d, mkJob(dest, k, 1, record(k)))
		}
	}
	for i := range 2 { // a later burst of a does not jump ahead of b and c
		k := key("a", 10+i)
		mustSubmit(t, d, mkJob(dest, k, 1, record(k)))
	}
	close(b.release)
	c.take(t, 12)
	want := []string{"a", "b", "c", "a", "b", "c", "a", "b", "c", "a", "a"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("service order %v; want %v", order, want)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func TestSameKeyNeverTwice(t *testing.T) {
	k := key("ns", 1)
	var d *Dispatcher[int]
	duringDeliver := make(chan error, 1)
	c := newCollector()
	d = newDispatcher(t, Options[int]{Deliver: func(x Completion[int]) {
		if x.Key == k {
			// The key stays taken until Deliver returns (the controller stores the outcome first).
			if !d.Holds(k) {
				t.Error("Holds during Deliver = false; want true")
			}
			duringDeliver <- d.Submit(mkJob("D/x", k, 1, func(context.Context) int { return 0 }))
		}
		c.deliver(x)
	}})
	b := newBlocker(2)
	other := key("ns", 2)
	mustSubmit(t, d, mkJob("D/x", other, 1, b.run(other, 0))) // holds the only slot
	mustSubmit(t, d, mkJob("D/x", k, 1, b.run(k, 1)))         // queued
	if err := d.Submit(mkJob("D/x", k, 1, b.run(k, 1))); !errors.Is(err, ErrAlreadyQueued) {
		t.Fatalf("Submit of a queued key = %v; want ErrAlreadyQueued", err)
	}
	if !d.Holds(k) || d.Holds(key("ns", 3)) {
		t.Fatalf("Holds(queued) = %v, Holds(unknown) = %v; want true, false", d.Holds(k), d.Holds(key("ns", 3)))
	}
	b.awaitStarted(t, 1)
	b.release <- struct{}{} // finish other; k starts
	if got := b.awaitStarted(t, 1); got[0] != k {
		t.Fatalf("started %v; want %v", got[0], k)
	}
	if err := d.Submit(mkJob("D/y", k, 1, b.run(k, 1))); !errors.Is(err, ErrAlreadyQueued) {
		t.Fatalf("Submit of a running key (even on another destination) = %v; want ErrAlreadyQueued", err)
	}
	close(b.release)
	c.take(t, 2)
	if err := <-duringDeliver; !errors.Is(err, ErrAlreadyQueued) {
		t.Fatalf("Submit during Deliver = %v; want ErrAlreadyQueued", err)
	}
	eventually(t, "key free after delivery", func() bool {
		err := d.Submit(mkJob("D/x", k, 1, func(context.Context) int { return 2 }))
		return err == nil
	})
	if x := c.next(t); x.Result != 2 {
		t.Fatalf("resubmitted job result %d; want 2", x.Result)
	}
}

func TestGlobalLimit(t *testing.T) {
	c := newCollector()
	const global = 5
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, MaxInFlight: global})
	b := newBlocker(12)
	for i := range 12 {
		k := key(fmt.Sprintf("ns%d", i), i)
		mustSubmit(t, d, mkJob(fmt.Sprintf("D/d%d", i%4), k, 3, b.run(k, i)))
	}
	b.awaitStarted(t, global)
	if got := d.TotalInFlight(); got != global {
		t.Fatalf("TotalInFlight = %d; want %d", got, global)
	}
	close(b.release)
	c.take(t, 12)
	if p := b.g.peak.Load(); p != global {
		t.Fatalf("peak %d; want the global limit %d", p, global)
	}
}

// When the global pool is full, a freed slot goes to the next destination waiting, not back to the one that
// freed it.
func TestGlobalSlotsRotateAcrossDestinations(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, MaxInFlight: 4})
	rel := map[types.NamespacedName]chan struct{}{}
	started := make(chan types.NamespacedName, 16)
	run := func(k types.NamespacedName) func(context.Context) int {
		ch := make(chan struct{})
		rel[k] = ch
		return func(ctx context.Context) int {
			started <- k
			<-ch
			return 0
		}
	}
	for i := range 8 { // 4 run, 4 queued on A
		k := key("a", i)
		mustSubmit(t, d, mkJob("D/A", k, 4, run(k)))
	}
	for range 4 {
		<-started
	}
	kb := key("b", 0)
	mustSubmit(t, d, mkJob("D/B", kb, 4, run(kb)))
	close(rel[key("a", 0)])
	select {
	case got := <-started:
		if got != kb {
			t.Fatalf("freed slot went to %v; want %v", got, kb)
		}
	case <-time.After(wait):
		t.Fatal("nothing started after a slot was freed")
	}
	for k, ch := range rel {
		if k != key("a", 0) {
			close(ch)
		}
	}
	c.take(t, 9)
}

func TestShutdownDeliversInFlightAndReportsQueuedAsNotSent(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, ShutdownGrace: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- d.Start(ctx) }()

	ctxErrs := make(chan error, 2)
	b := newBlocker(5)
	for i := range 5 {
		k := key("ns", i)
		run := b.run(k, 100+i)
		j := mkJob("D/s", k, 2, func(ctx context.Context) int {
			v := run(ctx)
			ctxErrs <- ctx.Err()
			return v
		})
		j.NotRun = func(err error) int {
			if errors.Is(err, ErrShutdown) {
				return -1
			}
			return 0
		}
		mustSubmit(t, d, j)
	}
	b.awaitStarted(t, 2)
	cancel()
	notSent := c.take(t, 3)
	for k, x := range notSent {
		if x.Started || !errors.Is(x.Err, ErrShutdown) || !x.Draining || x.Attempt != 1 || x.Result != -1 {
			t.Fatalf("queued job %v at shutdown: %+v; want not started, ErrShutdown, draining", k, x)
		}
	}
	if err := d.Submit(mkJob("D/s", key("ns", 9), 2, b.run(key("ns", 9), 0))); !errors.Is(err, ErrStopped) {
		t.Fatalf("Submit after the stop began = %v; want ErrStopped", err)
	}
	if d.HasRoom("D/s", "other") {
		t.Fatal("HasRoom after the stop began = true; want false")
	}
	close(b.release)
	sent := c.take(t, 2)
	for k, x := range sent {
		if !x.Started || x.Err != nil || x.Result < 100 || !x.Draining {
			t.Fatalf("in-flight job %v: %+v; want its result, delivered while draining", k, x)
		}
		if _, dup := notSent[k]; dup {
			t.Fatalf("job %v reported both sent and not sent", k)
		}
	}
	for range 2 {
		if err := <-ctxErrs; err != nil {
			t.Fatalf("an in-flight job's context ended (%v) inside the grace", err)
		}
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Start did not return after the in-flight jobs finished")
	}
}

func TestShutdownCancelsRunsAfterGrace(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	c := newCollector()
	const grace = 25 * time.Second
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, ShutdownGrace: grace, Clock: fc})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = d.Start(ctx); close(stopped) }()

	started := make(chan struct{})
	sawCancel := make(chan error, 1)
	k := key("ns", 0)
	mustSubmit(t, d, mkJob("D/hang", k, 0, func(ctx context.Context) int {
		close(started)
		<-ctx.Done() // a destination that never answers
		sawCancel <- ctx.Err()
		return -1
	}))
	<-started
	cancel()
	eventually(t, "grace timer armed", fc.HasWaiters)
	fc.Step(grace)
	select {
	case err := <-sawCancel:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run context ended with %v; want context.Canceled", err)
		}
	case <-time.After(wait):
		t.Fatal("the run's context was not cancelled after the grace")
	}
	x := c.next(t)
	if x.Key != k || !x.Started || x.Result != -1 || !x.Draining {
		t.Fatalf("completion %+v; want the run's own result, delivered", x)
	}
	select {
	case <-stopped:
	case <-time.After(wait):
		t.Fatal("Start did not return")
	}
}

func TestStartDeadlinePassedInQueue(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, Clock: fc})
	b := newBlocker(2)
	hold := key("ns", 0)
	mustSubmit(t, d, mkJob("D/q", hold, 1, b.run(hold, 0)))
	b.awaitStarted(t, 1)
	k := key("ns", 1)
	j := mkJob("D/q", k, 1, b.run(k, 1))
	j.StartBy = fc.Now().Add(time.Second)
	mustSubmit(t, d, j)
	fc.Step(2 * time.Second)
	x := c.next(t)
	if x.Key != k || x.Started || !errors.Is(x.Err, ErrStartDeadline) || x.Draining || x.Waited != 2*time.Second {
		t.Fatalf("completion %+v; want %v not started with ErrStartDeadline after 2s", x, k)
	}
	if q := d.Queued("D/q"); q != 0 {
		t.Fatalf("Queued = %d; want 0", q)
	}
	close(b.release)
	if x := c.next(t); x.Key != hold {
		t.Fatalf("completion %+v; want %v", x, hold)
	}
}

func TestRunPanicIsReportedAndFreesTheSlot(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver})
	pj := mkJob("D/p", key("ns", 0), 1, func(context.Context) int { panic("boom") })
	pj.NotRun = func(err error) int {
		if errors.Is(err, ErrRunPanicked) {
			return -2
		}
		return 0
	}
	mustSubmit(t, d, pj)
	mustSubmit(t, d, mkJob("D/p", key("ns", 1), 1, func(context.Context) int { return 1 }))
	got := c.take(t, 2)
	if x := got[key("ns", 0)]; !x.Started || !errors.Is(x.Err, ErrRunPanicked) || x.Result != -2 {
		t.Fatalf("panicking run: %+v; want started with ErrRunPanicked", x)
	}
	if x := got[key("ns", 1)]; !x.Started || x.Err != nil || x.Result != 1 {
		t.Fatalf("next run: %+v", x)
	}
}

func TestHasRoom(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver})
	b := newBlocker(4)
	if !d.HasRoom("D/h", "a") {
		t.Fatal("HasRoom on an idle destination = false")
	}
	for i := range 4 {
		k := key("a", i)
		mustSubmit(t, d, mkJob("D/h", k, 2, b.run(k, i)))
	}
	b.awaitStarted(t, 2)
	if d.HasRoom("D/h", "a") {
		t.Fatal("HasRoom for the namespace holding a full queue = true")
	}
	if !d.HasRoom("D/h", "b") {
		t.Fatal("HasRoom for a namespace with nothing queued = false; a tenant must not be kept out by another's backlog")
	}
	close(b.release)
	c.take(t, 4)
}

func TestSubmitRejectsIncompleteJobs(t *testing.T) {
	d := newDispatcher(t, Options[int]{Deliver: func(Completion[int]) {}})
	ok := mkJob("D/v", key("ns", 0), 0, func(context.Context) int { return 0 })
	for name, mut := range map[string]func(*Job[int]){
		"no destination": func(j *Job[int]) { j.Destination = "" },
		"no key":         func(j *Job[int]) { j.Key = types.NamespacedName{} },
		"no deadline":    func(j *Job[int]) { j.Deadline = time.Time{} },
		"no run":         func(j *Job[int]) { j.Run = nil },
	} {
		j := ok
		mut(&j)
		if err := d.Submit(j); err == nil || errors.Is(err, ErrAlreadyQueued) {
			t.Errorf("%s: Submit = %v; want a validation error", name, err)
		}
	}
	if _, err := New(Options[int]{}); err == nil {
		t.Error("New without Deliver succeeded")
	}
	if !d.NeedLeaderElection() {
		t.Error("NeedLeaderElection = false")
	}
}

// metricValue returns the value of the series of name with destination dest in controller-runtime's registry.
func metricValue(t *testing.T, name, dest string) (float64, bool) {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "destination" && l.GetValue() == dest {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func TestMetricsFollowTheQueueAndVanishWhenIdle(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver})
	const dest = "Destination/metrics/m"
	b := newBlocker(5)
	for i := range 5 {
		k := key("ns", i)
		mustSubmit(t, d, mkJob(dest, k, 2, b.run(k, i)))
	}
	b.awaitStarted(t, 2)
	if v, ok := metricValue(t, "actionledger_inflight_sends", dest); !ok || v != 2 {
		t.Fatalf("actionledger_inflight_sends = %v (present %v); want 2", v, ok)
	}
	if v, ok := metricValue(t, "actionledger_queued_sends", dest); !ok || v != 3 {
		t.Fatalf("actionledger_queued_sends = %v (present %v); want 3", v, ok)
	}
	close(b.release)
	c.take(t, 5)
	eventually(t, "series deleted", func() bool {
		_, a := metricValue(t, "actionledger_inflight_sends", dest)
		_, b := metricValue(t, "actionledger_queued_sends", dest)
		return !a && !b
	})
}

func TestStartTwice(t *testing.T) {
	d := newDispatcher(t, Options[int]{Deliver: func(Completion[int]) {}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Start(ctx); close(done) }()
	eventually(t, "started", func() bool { d.mu.Lock(); defer d.mu.Unlock(); return d.started })
	if err := d.Start(context.Background()); err == nil {
		t.Fatal("second Start succeeded")
	}
	cancel()
	<-done
}

func BenchmarkDispatch(b *testing.B) {
	var wg sync.WaitGroup
	d, err := New(Options[int]{Deliver: func(Completion[int]) { wg.Done() }})
	if err != nil {
		b.Fatal(err)
	}
	run := func(context.Context) int { return 0 }
	deadline := time.Now().Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		wg.Add(1)
		j := Job[int]{Destination: fmt.Sprintf("D/d%d", i%8), Key: key(fmt.Sprintf("ns%d", i%16), i),
			MaxInFlight: 32, Deadline: deadline, Run: run}
		if err := d.Submit(j); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
}

// Run's context ends at the job's Deadline (the claim's expiry minus the margin).
func TestRunContextEndsAtDeadline(t *testing.T) {
	c := newCollector()
	d := newDispatcher(t, Options[int]{Deliver: c.deliver})
	j := mkJob("D/dl", key("ns", 0), 0, func(ctx context.Context) int {
		<-ctx.Done()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 1
		}
		return 0
	})
	j.Deadline = time.Now().Add(20 * time.Millisecond)
	mustSubmit(t, d, j)
	if x := c.next(t); !x.Started || x.Result != 1 {
		t.Fatalf("completion %+v; want the run to see context.DeadlineExceeded", x)
	}
}

// Issue 40: the global pool is shared fairly over namespaces, not over destinations. A tenant with sixteen
// Destinations of its own fills the whole pool; another tenant's four jobs on its one Destination take the next
// four slots the first tenant frees, ahead of the first tenant's backlog.
func TestGlobalPoolIsFairOverNamespaces(t *testing.T) {
	c := newCollector()
	const global = 16
	d := newDispatcher(t, Options[int]{Deliver: c.deliver, MaxInFlight: global})
	rel := map[types.NamespacedName]chan struct{}{}
	started := make(chan types.NamespacedName, 256)
	run := func(k types.NamespacedName) func(context.Context) int {
		ch := make(chan struct{})
		rel[k] = ch
		return func(ctx context.Context) int {
			started <- k
			select {
			case <-ch:
			case <-ctx.Done():
			}
			return 0
		}
	}
	n := 0
	for dest := range 16 {
		for range 4 {
			k := key("hog", n)
			n++
			mustSubmit(t, d, mkJob(fmt.Sprintf("Destination/hog/d%d", dest), k, 4, run(k)))
		}
	}
	hogs := map[types.NamespacedName]bool{}
	for range global {
		hogs[<-started] = true
	}
	for i := range 4 {
		k := key("victim", i)
		mustSubmit(t, d, mkJob("Destination/victim/pay", k, 4, run(k)))
	}
	freed := 0
	for k := range hogs {
		if freed == 4 {
			break
		}
		close(rel[k])
		delete(rel, k)
		freed++
		select {
		case got := <-started:
			if got.Namespace != "victim" {
				t.Fatalf("freed slot %d went to %v; want the victim's next job", freed, got)
			}
		case <-time.After(wait):
			t.Fatal("nothing started after a slot was freed")
		}
	}
	for _, ch := range rel {
		close(ch)
	}
	c.take(t, 64+4)
}
