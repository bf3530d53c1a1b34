package noisy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Load is how hard team-a pushes.
type Load struct {
	// PredicateBurst is how many actions each predicate destination (ASCII, invalid UTF-8) gets at the start,
	// PredicatePerSecond how many more each second: each judged by FiveSplits or WorstMatch, alternately.
	PredicateBurst, PredicatePerSecond int
	// Stalls is the maxInFlight of each stalling destination (zstd, brotli) and the actions it gets at the start;
	// StallsPerSecond more each second.
	Stalls, StallsPerSecond int
	// Trickles is the maxInFlight of the trickling destination and the actions it gets at the start, each with
	// an output ComboWorst; TricklesPerSecond more each second.
	Trickles, TricklesPerSecond int
	// TrickleBytes is the size of the trickled body.
	TrickleBytes int
}

// FullLoad is the noisy neighbour at its maximum: the evaluation slots offered more than they can judge (each
// worst predicate takes 0.1 to 0.3 s of one of the chart's 2 slots), both stalling destinations at their
// maxInFlight, the default (64), each stalled action held 3 attempts of 20 s, and 16 bodies of 15 MiB trickling.
func FullLoad() Load {
	return Load{PredicateBurst: 100, PredicatePerSecond: 2, Stalls: 64, StallsPerSecond: 1, Trickles: 16,
		TricklesPerSecond: 1, TrickleBytes: 15 << 20}
}

// TeamA is the noisy tenant: its namespace, its Destinations and the actions it keeps creating.
type TeamA struct {
	NS   string
	Load Load
	Srv  *Servers
	cl   client.Client

	late                bool // the action on the refused Destination is created
	created, createErrs atomic.Int64
	lastErr             atomic.Value
	cancel              context.CancelFunc
	wg                  sync.WaitGroup
}

// Team-a's Destinations.
const (
	destASCII   = "ascii"
	destInvalid = "invalid-utf8"
	destZstd    = "zstd"
	destBrotli  = "brotli"
	destTrickle = "trickle"
	destTarget  = "target"  // the refused actions' destination: Ready; the actions must never reach it
	destRefused = "refused" // its reconciliation.applied is refused: never Ready
	// RefusedPrefix starts the names of the refused actions.
	RefusedPrefix = "refused-"
	// LateName is the action created on the refused Destination once it is seen refused.
	LateName = RefusedPrefix + "late"
)

// SetUp creates team-a's Destinations in ns and the actions of the Refused shapes.
func SetUp(ctx context.Context, cl client.Client, ns string, srv *Servers, load Load) (*TeamA, error) {
	a := &TeamA{NS: ns, Load: load, Srv: srv, cl: cl}
	d := func(name, url string, mutate func(*actionsv1alpha1.DestinationSpec)) *actionsv1alpha1.Destination {
		o := &actionsv1alpha1.Destination{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: actionsv1alpha1.DestinationSpec{URL: url}}
		if mutate != nil {
			mutate(&o.Spec)
		}
		return o
	}
	stalling := func(s *actionsv1alpha1.DestinationSpec) {
		// Unsafe (no key support): a stall that times out is uncertain, so the post-check asks, judged by the
		// worst admitted predicates over the invalid UTF-8 body; not applied, the action is sent again.
		s.Timeout = &metav1.Duration{Duration: 20 * time.Second}
		s.Idempotency = &actionsv1alpha1.IdempotencyConfig{Supported: false}
		s.Concurrency = &actionsv1alpha1.Concurrency{MaxInFlight: inFlight(load.Stalls)}
		s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{Path: "/check/{name}", Applied: WorstMatch,
			NotApplied: FiveSplits, MaxChecks: new(int32(2))}
		s.RetryPolicy = &actionsv1alpha1.RetryPolicy{MaxAttempts: new(int32(3)),
			InitialBackoff: &metav1.Duration{Duration: time.Second}}
	}
	var applied string
	for _, s := range Refused {
		if s.Field == FieldApplied {
			applied = s.Expr
		}
	}
	objs := make([]client.Object, 0, 7+len(Refused))
	objs = append(objs,
		d(destASCII, srv.ASCII, nil),
		d(destInvalid, srv.Invalid, nil),
		d(destZstd, srv.Zstd, stalling),
		d(destBrotli, srv.Brotli, stalling),
		d(destTrickle, srv.Trickle, func(s *actionsv1alpha1.DestinationSpec) {
			s.Timeout = &metav1.Duration{Duration: TrickleTime + time.Minute}
			s.Concurrency = &actionsv1alpha1.Concurrency{MaxInFlight: inFlight(load.Trickles)}
		}),
		d(destTarget, srv.ASCII+"/refused/target", nil),
		d(destRefused, srv.ASCII+"/refused/destination", func(s *actionsv1alpha1.DestinationSpec) {
			s.Reconciliation = &actionsv1alpha1.ReconciliationCheck{Path: "/check/{name}", Applied: applied, NotApplied: "false"}
		}),
	)
	for i, s := range Refused {
		if s.Field == FieldApplied {
			continue // its action is created once its Destination is refused (Refusals)
		}
		xa := action(ns, fmt.Sprintf("%s%d", RefusedPrefix, i), destTarget)
		xa.Spec.Request.Path = "/" + xa.Name // a request would name the action
		switch s.Field {
		case FieldSuccessWhen:
			xa.Spec.SuccessWhen = s.Expr
		case FieldOutput:
			xa.Spec.Outputs = &actionsv1alpha1.ActionOutputs{ConfigMapName: xa.Name,
				Values: map[string]actionsv1alpha1.OutputExpression{"v": actionsv1alpha1.OutputExpression(s.Expr)}}
		}
		objs = append(objs, xa)
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("creating %T %s/%s: %w", o, ns, o.GetName(), err)
		}
	}
	return a, nil
}

// inFlight is n as a maxInFlight (1 to 1024).
func inFlight(n int) *int32 { return new(int32(min(max(n, 1), 1024))) } //nolint:gosec // 1 to 1024

func action(ns, name, dest string) *actionsv1alpha1.ExternalAction {
	return &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: actionsv1alpha1.ExternalActionSpec{
			DestinationRef: actionsv1alpha1.DestinationReference{Name: dest},
			Request: actionsv1alpha1.ActionRequest{Method: "POST", Path: "/x",
				Body: &apiextensionsv1.JSON{Raw: []byte(`{"n":1}`)}},
		},
	}
}

// Refusals waits up to timeout for every refused shape to be refused, and returns what it found: each refused
// action Failed with reason InvalidSpec and a message naming its field and the compiler's error, nothing attempted;
// the refused Destination not Ready with its message, and an action created on it once it is (LateName) not sent;
// no request at their destinations. problems lists what was not so.
func (a *TeamA) Refusals(ctx context.Context, timeout time.Duration) (refused int, messages, problems []string) {
	deadline := time.Now().Add(timeout)
	for {
		refused, messages, problems = a.refusals(ctx)
		if len(problems) == 0 || time.Now().After(deadline) {
			if n := a.Srv.RefusedRequests.Load(); n != 0 {
				problems = append(problems, fmt.Sprintf("the refused shapes' destinations received %d requests, want 0: %v",
					n, a.Srv.RefusedSeen()))
			}
			return refused, messages, problems
		}
		select {
		case <-ctx.Done():
			return refused, messages, append(problems, ctx.Err().Error())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (a *TeamA) refusals(ctx context.Context) (refused int, messages, problems []string) {
	for i, s := range Refused {
		want := s.Message()
		if s.Field == FieldApplied {
			d := &actionsv1alpha1.Destination{}
			if err := a.cl.Get(ctx, client.ObjectKey{Namespace: a.NS, Name: destRefused}, d); err != nil {
				problems = append(problems, err.Error())
				continue
			}
			c := meta.FindStatusCondition(d.Status.Conditions, actionsv1alpha1.ConditionReady)
			if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, want) {
				problems = append(problems, fmt.Sprintf("Destination %s (%s): Ready %+v, want False with %q",
					destRefused, s.Name, c, want))
				continue
			}
			if !a.late {
				late := action(a.NS, LateName, destRefused)
				late.Spec.Request.Path = "/" + LateName
				if err := a.cl.Create(ctx, late); err != nil {
					problems = append(problems, err.Error())
					continue
				}
				a.late = true
			}
			if p := a.unsent(ctx, LateName); p != "" {
				problems = append(problems, p)
				continue
			}
			refused++
			messages = append(messages, "Destination: "+c.Message)
			continue
		}
		name := fmt.Sprintf("%s%d", RefusedPrefix, i)
		xa := &actionsv1alpha1.ExternalAction{}
		if err := a.cl.Get(ctx, client.ObjectKey{Namespace: a.NS, Name: name}, xa); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionStalled)
		if xa.Status.Phase != actionsv1alpha1.PhaseFailed || c == nil || c.Reason != actionsv1alpha1.ReasonInvalidSpec ||
			!strings.Contains(xa.Status.LastError, want) || xa.Status.Attempts != 0 {
			problems = append(problems, fmt.Sprintf(
				"%s (%s): phase %s, attempts %d, lastError %q; want Failed InvalidSpec, no attempt, %q",
				name, s.Name, xa.Status.Phase, xa.Status.Attempts, xa.Status.LastError, want))
			continue
		}
		refused++
		messages = append(messages, "ExternalAction: "+xa.Status.LastError)
	}
	return refused, messages, problems
}

// unsent describes the action name on the refused Destination if anything was sent for it ("": nothing).
func (a *TeamA) unsent(ctx context.Context, name string) string {
	xa := &actionsv1alpha1.ExternalAction{}
	if err := a.cl.Get(ctx, client.ObjectKey{Namespace: a.NS, Name: name}, xa); err != nil {
		return err.Error()
	}
	if xa.Status.Attempts != 0 || xa.Status.Phase.Terminal() {
		return fmt.Sprintf("%s, on Destination %s whose reconciliation.applied is refused: phase %s, attempts %d, "+
			"lastError %q; want nothing sent", name, destRefused, xa.Status.Phase, xa.Status.Attempts, xa.Status.LastError)
	}
	return ""
}

// Unsent checks, later, that nothing was sent for the refused shapes: no request under /refused, and the action
// on the refused Destination not attempted. It returns what was not so.
func (a *TeamA) Unsent(ctx context.Context) []string {
	var problems []string
	if p := a.unsent(ctx, LateName); p != "" {
		problems = append(problems, p)
	}
	if n := a.Srv.RefusedRequests.Load(); n != 0 {
		problems = append(problems, fmt.Sprintf("the refused shapes' destinations received %d requests, want 0: %v",
			n, a.Srv.RefusedSeen()))
	}
	return problems
}

// Start keeps creating team-a's actions until Stop: the bursts at once, then the rates.
func (a *TeamA) Start(ctx context.Context) {
	ctx, a.cancel = context.WithCancel(ctx)
	l := a.Load
	predicate := func(xa *actionsv1alpha1.ExternalAction, i int) {
		xa.Spec.SuccessWhen = FiveSplits
		if i%2 == 1 {
			xa.Spec.SuccessWhen = WorstMatch
		}
	}
	trickle := func(xa *actionsv1alpha1.ExternalAction, _ int) {
		xa.Spec.Outputs = &actionsv1alpha1.ActionOutputs{ConfigMapName: xa.Name,
			Values: map[string]actionsv1alpha1.OutputExpression{"v": actionsv1alpha1.OutputExpression(ComboWorst)}}
	}
	for _, g := range []struct {
		dest        string
		burst, perS int
		shape       func(*actionsv1alpha1.ExternalAction, int)
	}{
		{destASCII, l.PredicateBurst, l.PredicatePerSecond, predicate},
		{destInvalid, l.PredicateBurst, l.PredicatePerSecond, predicate},
		{destZstd, l.Stalls, l.StallsPerSecond, nil},
		{destBrotli, l.Stalls, l.StallsPerSecond, nil},
		{destTrickle, l.Trickles, l.TricklesPerSecond, trickle},
	} {
		a.wg.Go(func() { a.generate(ctx, g.dest, g.burst, g.perS, g.shape) })
	}
}

func (a *TeamA) generate(ctx context.Context, dest string, burst, perS int,
	shape func(*actionsv1alpha1.ExternalAction, int)) {
	create := func(i int) {
		xa := action(a.NS, fmt.Sprintf("%s-%d", dest, i), dest)
		if shape != nil {
			shape(xa, i)
		}
		if err := a.cl.Create(ctx, xa); err != nil {
			if ctx.Err() == nil {
				a.createErrs.Add(1)
				a.lastErr.Store(err.Error())
			}
			return
		}
		a.created.Add(1)
	}
	i := 0
	for ; i < burst && ctx.Err() == nil; i++ {
		create(i)
	}
	if perS <= 0 {
		return
	}
	tick := time.NewTicker(time.Second / time.Duration(perS))
	defer tick.Stop()
	for ; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			create(i)
		}
	}
}

// Stop stops creating and describes what team-a did.
func (a *TeamA) Stop() string {
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	req, open := a.Srv.Counts()
	var s strings.Builder
	fmt.Fprintf(&s, "team-a created %d actions (%d creates refused", a.created.Load(), a.createErrs.Load())
	if e, ok := a.lastErr.Load().(string); ok {
		s.WriteString(", the last: " + e)
	}
	keys := make([]string, 0, len(req))
	for k := range req {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s.WriteString("); requests at its servers (most at once):")
	for _, k := range keys {
		fmt.Fprintf(&s, " %s %d (%d)", k, req[k], open[k])
	}
	return s.String()
}

// Result is team-b's run: create → Succeeded of each action that Succeeded, and the phases all ended in.
type Result struct {
	Actions int
	// Latencies are from just before each create call to the watch event that shows it Succeeded, sorted.
	Latencies []time.Duration
	Phases    map[actionsv1alpha1.Phase]int
	// Unfinished are the actions with no terminal phase when the run gave up.
	Unfinished []string
	Seconds    float64
	// Traces is each action's timeline as this run saw it: when its create began and returned, and every watch
	// event of it (for the stage breakdown of the benchmark).
	Traces map[string]*Trace
}

// Trace is one action's timeline seen from the test: its create call and its watch events.
type Trace struct {
	Sent, Created time.Time
	Events        []Event
}

// Event is one watch event of an action.
type Event struct {
	At       time.Time
	Type     watch.EventType
	Phase    actionsv1alpha1.Phase
	Attempts int32
	Gen      int64
	RV       string
}

// Quantile is the q-quantile of the latencies in seconds (nearest rank; 0 without any).
func (r Result) Quantile(q float64) float64 {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q*float64(len(r.Latencies))+0.5) - 1
	return r.Latencies[min(max(i, 0), len(r.Latencies)-1)].Seconds()
}

func (r Result) String() string {
	phases := make([]string, 0, len(r.Phases))
	for p, n := range r.Phases {
		phases = append(phases, fmt.Sprintf("%s=%d", p, n))
	}
	slices.Sort(phases)
	return fmt.Sprintf("%d actions: %s, unfinished %d; create->Succeeded p50 %.3fs p99 %.3fs max %.3fs; "+
		"all ended in %.1fs", r.Actions, strings.Join(phases, " "), len(r.Unfinished), r.Quantile(0.5), r.Quantile(0.99),
		r.Quantile(1), r.Seconds)
}

// SuccessWhen is team-b's predicate.
const SuccessWhen = "response.statusCode == 201"

// TeamB creates n actions named prefix-<i> in ns on dest (POST, successWhen SuccessWhen), perSecond a second (0:
// as fast as 8 clients can), and waits up to timeout for each to end; it measures create → Succeeded from its own
// watch.
func TeamB(ctx context.Context, wc client.WithWatch, ns, dest, prefix string, n int, perSecond float64,
	timeout time.Duration) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	w, err := retryWatch(ctx, wc, ns)
	if err != nil {
		return Result{}, fmt.Errorf("watching %s: %w", ns, err)
	}
	defer w.Stop()
	began := time.Now()
	c := &creator{sent: map[string]time.Time{}, created: map[string]time.Time{}}
	go c.create(ctx, cancel, wc, ns, dest, prefix, n, perSecond)
	res := Result{Actions: n, Phases: map[actionsv1alpha1.Phase]int{}, Traces: map[string]*Trace{}}
	ended, err := collect(ctx, w, prefix, n, func(ev watch.EventType, xa *actionsv1alpha1.ExternalAction) {
		tr := res.Traces[xa.Name]
		if tr == nil {
			tr = &Trace{}
			res.Traces[xa.Name] = tr
		}
		tr.Events = append(tr.Events, Event{At: time.Now(), Type: ev, Phase: xa.Status.Phase,
			Attempts: xa.Status.Attempts, Gen: xa.Generation, RV: xa.ResourceVersion})
	}, func(xa *actionsv1alpha1.ExternalAction) {
		res.Phases[xa.Status.Phase]++
		if xa.Status.Phase == actionsv1alpha1.PhaseSucceeded {
			res.Latencies = append(res.Latencies, time.Since(c.at(xa.Name)))
		}
	})
	res.Seconds = time.Since(began).Seconds()
	slices.Sort(res.Latencies)
	c.mu.Lock()
	for name, tr := range res.Traces {
		tr.Sent, tr.Created = c.sent[name], c.created[name]
	}
	c.mu.Unlock()
	for i := range n {
		if name := fmt.Sprintf("%s-%03d", prefix, i); !ended[name] {
			res.Unfinished = append(res.Unfinished, name)
		}
	}
	if cerr := c.firstErr(); cerr != nil {
		return res, fmt.Errorf("creating team-b's actions: %w", cerr)
	}
	if err != nil {
		return res, err
	}
	if len(res.Unfinished) > 0 {
		return res, errors.New("team-b's actions did not all end in time")
	}
	return res, nil
}

// retryWatch watches the ExternalActions of ns from now on, as an informer does: when the API server ends the
// watch (it may, under load, for a watcher it finds slow), it is started again from the last resourceVersion seen,
// so no event is lost (client-go's RetryWatcher). It ends with ctx, or when the resourceVersion is too old to
// watch from (410 Gone).
func retryWatch(ctx context.Context, wc client.WithWatch, ns string) (watch.Interface, error) {
	list := &actionsv1alpha1.ExternalActionList{}
	if err := wc.List(ctx, list, client.InNamespace(ns), client.Limit(1)); err != nil {
		return nil, err
	}
	return watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return wc.Watch(ctx, &actionsv1alpha1.ExternalActionList{}, client.InNamespace(ns), &client.ListOptions{Raw: &o})
		}})
}

// creator creates team-b's actions and remembers when each create began.
type creator struct {
	mu      sync.Mutex
	sent    map[string]time.Time
	created map[string]time.Time // when the create call returned
	err     error                // the first create error
}

func (c *creator) firstErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *creator) at(name string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent[name]
}

func (c *creator) create(ctx context.Context, cancel context.CancelFunc, cl client.Client, ns, dest, prefix string,
	n int, perSecond float64) {
	one := func(i int) {
		xa := action(ns, fmt.Sprintf("%s-%03d", prefix, i), dest)
		xa.Spec.Request.Body.Raw = fmt.Appendf(nil, `{"amount":%d}`, i)
		xa.Spec.SuccessWhen = SuccessWhen
		c.mu.Lock()
		c.sent[xa.Name] = time.Now()
		c.mu.Unlock()
		err := cl.Create(ctx, xa)
		c.mu.Lock()
		c.created[xa.Name] = time.Now()
		c.mu.Unlock()
		if err != nil {
			c.mu.Lock()
			if c.err == nil {
				c.err = fmt.Errorf("%s: %w", xa.Name, err)
			}
			c.mu.Unlock()
			cancel()
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if perSecond > 0 {
		tick := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
		defer tick.Stop()
		for i := range n {
			if i > 0 {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
			wg.Go(func() { one(i) })
		}
		return
	}
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				one(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
}

// collect reads w until n actions named prefix-* reached a terminal phase or ctx ends, calling seen for every
// event of one of them and end once for each.
func collect(ctx context.Context, w watch.Interface, prefix string, n int,
	seen func(watch.EventType, *actionsv1alpha1.ExternalAction), end func(*actionsv1alpha1.ExternalAction)) (
	map[string]bool, error) {
	ended := map[string]bool{}
	for len(ended) < n && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case ev, ok := <-w.ResultChan():
			if !ok {
				return ended, errors.New("the watch ended")
			}
			xa, isXA := ev.Object.(*actionsv1alpha1.ExternalAction)
			if !isXA || ev.Type == watch.Deleted || !strings.HasPrefix(xa.Name, prefix+"-") || ended[xa.Name] {
				continue
			}
			seen(ev.Type, xa)
			if !xa.Status.Phase.Terminal() {
				continue
			}
			ended[xa.Name] = true
			end(xa)
		}
	}
	return ended, nil
}
