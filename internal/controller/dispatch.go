package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/send"
)

// How a send flows (DESIGN rule 10): the reconcile writes the claim (rule 1), submits a job to the Dispatcher
// and returns. The dispatcher runs the job's send when the destination has a free slot; the job's result (a
// send.Result) comes back through receive, which stores it in the mailbox, and the manager's dispatcher then
// wakes the object through its outcomes channel. The next Reconcile of the object records it first (rule 2).

const (
	// drainRecordTimeout bounds the direct record of an outcome handed back while the manager stops.
	drainRecordTimeout = 5 * time.Second
	// outcomeBuffer is the capacity of the manager dispatcher's outcomes channel.
	outcomeBuffer = 1024
)

// Dispatcher runs claimed sends and post-checks outside the reconcile workers. ManagerDispatcher (wrapping
// *dispatch.Dispatcher) is the manager's; InlineDispatcher runs each job in Submit (tests that drive Reconcile
// directly). Results come back through the reconciler's receive.
type Dispatcher interface {
	// Submit runs job (now or later); an error means it was not taken and nothing was sent.
	Submit(ctx context.Context, job dispatch.Job[*send.Result]) error
	// HasRoom reports whether a job for destination from namespace would start without waiting long.
	HasRoom(destination, namespace string) bool
	// Holds reports whether a job of key is queued or running.
	Holds(key types.NamespacedName) bool
	// InFlight and Queued count destination's jobs running and waiting.
	InFlight(destination string) int
	Queued(destination string) int
}

// mailbox holds results not yet written (DESIGN rule 2): handed back by the dispatcher, or kept after a
// failed write. Recorded before anything else is decided, never re-sent.
//
// It also remembers the outcomes of unclaimed attempts it wrote (written) until the informer cache shows
// them: with no claim to lose a Conflict, a reconcile on a cached copy older than that write would send again.
type mailbox struct {
	m       sync.Map // types.NamespacedName -> *send.Result
	written sync.Map // types.NamespacedName -> writtenAt
}

// writtenAt identifies the object version an unclaimed outcome was written as.
type writtenAt struct {
	uid             types.UID
	resourceVersion string
}

func newMailbox() *mailbox { return &mailbox{} }

func (b *mailbox) store(nn types.NamespacedName, p *send.Result) { b.m.Store(nn, p) }
func (b *mailbox) drop(nn types.NamespacedName)                  { b.m.Delete(nn) }

// wrote remembers that xa is the version written with an unclaimed attempt's outcome.
func (b *mailbox) wrote(xa *actionsv1alpha1.ExternalAction) {
	b.written.Store(client.ObjectKeyFromObject(xa), writtenAt{uid: xa.UID, resourceVersion: xa.ResourceVersion})
}

// behind reports whether xa is a copy older than the version this manager wrote with an unclaimed outcome:
// same object, no attempt recorded in it yet, another resourceVersion. Once the cache has caught up (or the
// object is another one) the memory is dropped.
func (b *mailbox) behind(xa *actionsv1alpha1.ExternalAction) bool {
	nn := client.ObjectKeyFromObject(xa)
	v, ok := b.written.Load(nn)
	if !ok {
		return false
	}
	w := v.(writtenAt)
	if w.uid == xa.UID && w.resourceVersion != xa.ResourceVersion && xa.Status.Attempts == 0 {
		return true
	}
	b.written.Delete(nn)
	return false
}

// forgetWritten drops what wrote remembers of nn (the object is gone).
func (b *mailbox) forgetWritten(nn types.NamespacedName) { b.written.Delete(nn) }
func (b *mailbox) load(nn types.NamespacedName) (*send.Result, bool) {
	v, ok := b.m.Load(nn)
	if !ok {
		return nil, false
	}
	return v.(*send.Result), true
}

// receive takes one completion of the dispatcher: it accounts for the attempt and stores the result in the
// mailbox (DESIGN rule 2). It reports false for a send abandoned at the end of the shutdown grace, whose
// outcome is not recorded (its claim is left open: DESIGN rule 3 after a restart).
func (r *ExternalActionReconciler) receive(c dispatch.Completion[*send.Result]) bool {
	p := c.Result
	if p == nil { // every job has NotRun; kept for safety
		p = &send.Result{Attempt: c.Attempt, Outcome: send.NotRunOutcome(c.Err, r.Clock.Now())}
	}
	if p.Check == nil {
		send.Account(r.Limiter, c.Destination, p)
	}
	if p.Abandoned {
		log.Log.WithName("dispatch").Info("a send was still running at the end of the shutdown grace; its claim is left open "+
			"(DESIGN rule 3 after a restart)", "externalaction", c.Key, "attempt", c.Attempt)
		return false
	}
	r.parts.mailbox.store(c.Key, p)
	return true
}

// submit hands a claimed job to the dispatcher. A result already back when Submit returns (an inline
// dispatcher, or a send that finished at once) is recorded in this reconcile; a job the dispatcher refuses is
// recorded as not sent.
func (r *ExternalActionReconciler) submit(ctx context.Context, job dispatch.Job[*send.Result]) (*send.Result, error) {
	if err := r.Dispatcher.Submit(ctx, job); err != nil {
		return job.NotRun(err), err
	}
	if r.Dispatcher.Holds(job.Key) {
		return nil, nil
	}
	p, _ := r.parts.mailbox.load(job.Key)
	return p, nil
}

// ManagerDispatcher is the manager's Dispatcher: a dispatch.Dispatcher whose completions wake their object
// through outcomes (a source.Channel), or, once the manager stops, are recorded directly. SetupWithManager adds
// it to the manager (started only on the leader) and watches its outcomes.
type ManagerDispatcher struct {
	*dispatch.Dispatcher[*send.Result]
	r        *ExternalActionReconciler
	outcomes chan event.GenericEvent
	// stopped is closed when the manager stops: completions are then recorded directly.
	stopped chan struct{}
}

// NewManagerDispatcher makes the manager's dispatcher for r, with r.Options.MaxInFlight and ShutdownGrace, the
// process's byte budget (httpexec.Budget, shared with the decoders' windows) and r.Clock (a clock without delayed execution runs on the real clock): set it as r.Dispatcher before
// SetupWithManager. Its completions go to r. The error is dispatch.New's, for invalid options.
func NewManagerDispatcher(r *ExternalActionReconciler) (*ManagerDispatcher, error) {
	md := &ManagerDispatcher{r: r, outcomes: make(chan event.GenericEvent, outcomeBuffer), stopped: make(chan struct{})}
	clk, ok := r.Clock.(clock.WithDelayedExecution)
	if !ok {
		clk = clock.RealClock{}
	}
	d, err := dispatch.New(dispatch.Options[*send.Result]{
		MaxInFlight: r.Options.MaxInFlight, ShutdownGrace: r.Options.ShutdownGrace, Deliver: md.deliver, Clock: clk,
		Budget: httpexec.Budget(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating the dispatcher: %w", err)
	}
	md.Dispatcher = d
	return md, nil
}

// Submit hands job to the dispatcher; the job runs on the dispatcher's context, not ctx.
func (md *ManagerDispatcher) Submit(_ context.Context, job dispatch.Job[*send.Result]) error {
	return md.Dispatcher.Submit(job)
}

// Start starts the dispatcher with the manager and closes stopped when the stop begins.
func (md *ManagerDispatcher) Start(ctx context.Context) error {
	go func() { <-ctx.Done(); close(md.stopped) }()
	return md.Dispatcher.Start(ctx)
}

// deliver receives every completion: it stores the result and wakes the controller for the object, or, once
// the manager stops, records it directly.
func (md *ManagerDispatcher) deliver(c dispatch.Completion[*send.Result]) {
	if !md.r.receive(c) {
		return
	}
	if !c.Draining && md.wakeUp(c.Key) {
		// The completion freed room at its destination: wake the next send parked there (internal/waitroom).
		for _, nn := range md.r.parts.room.Wake(c.Destination, 1) {
			md.wakeUp(nn)
		}
		return
	}
	md.r.recordDirectly(c.Key)
}

// wakeUp puts key on the outcomes channel, which enqueues it; false once the manager stops.
func (md *ManagerDispatcher) wakeUp(key types.NamespacedName) bool {
	ev := event.GenericEvent{Object: &actionsv1alpha1.ExternalAction{}}
	ev.Object.SetNamespace(key.Namespace)
	ev.Object.SetName(key.Name)
	select {
	case md.outcomes <- ev:
		return true
	case <-md.stopped:
		return false
	}
}

// recordDirectly records the pending result of key from a fresh read, outside the workqueue (the workers are
// stopping). What cannot be written in drainRecordTimeout stays an open claim: DESIGN rule 3 after a restart.
func (r *ExternalActionReconciler) recordDirectly(key types.NamespacedName) {
	p, ok := r.parts.mailbox.load(key)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainRecordTimeout)
	defer cancel()
	logger := log.FromContext(ctx).WithValues("externalaction", key, "attempt", p.Attempt)
	ctx = log.IntoContext(ctx, logger)
	cur := &actionsv1alpha1.ExternalAction{}
	if err := r.APIReader.Get(ctx, key, cur); err != nil {
		if apierrors.IsNotFound(err) {
			r.parts.mailbox.drop(key)
			return
		}
		logger.Error(err, "reading the action to record an outcome while stopping; its claim is left open")
		return
	}
	if _, err := r.settle(ctx, cur, p); err != nil {
		logger.Error(err, "recording an outcome while stopping failed; its claim is left open")
	}
}

// InlineDispatcher runs each job in Submit, in the calling goroutine, as the manager's dispatcher would run it
// (its deadline and start-by bound), and hands the result to Deliver. It has no limits of its own: for a
// reconciler driven directly by a test.
type InlineDispatcher struct {
	Clock clock.PassiveClock
	// Deliver receives each completion (build sets the reconciler's receive).
	Deliver func(dispatch.Completion[*send.Result])
}

// Submit runs job now.
func (d *InlineDispatcher) Submit(ctx context.Context, job dispatch.Job[*send.Result]) error {
	c := dispatch.Completion[*send.Result]{Destination: job.Destination, Key: job.Key, Attempt: job.Attempt}
	if !d.Clock.Now().Before(job.StartBy) {
		c.Result, c.Err = job.NotRun(dispatch.ErrStartDeadline), dispatch.ErrStartDeadline
	} else {
		ctx, cancel := context.WithTimeout(ctx, job.Deadline.Sub(d.Clock.Now()))
		c.Result, c.Started = job.Run(ctx), true
		cancel()
	}
	d.Deliver(c)
	return nil
}

// HasRoom is always true: an inline job never waits.
func (d *InlineDispatcher) HasRoom(string, string) bool { return true }

// Holds is always false: an inline job is done when Submit returns.
func (d *InlineDispatcher) Holds(types.NamespacedName) bool { return false }

// InFlight is always 0.
func (d *InlineDispatcher) InFlight(string) int { return 0 }

// Queued is always 0.
func (d *InlineDispatcher) Queued(string) int { return 0 }
