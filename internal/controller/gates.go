package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/dispatch"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
	"github.com/actionledger/actionledger/internal/outputs"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/send"
	"github.com/actionledger/actionledger/internal/status"
	"github.com/actionledger/actionledger/internal/tracing"
)

// One reconcile of an active (Pending or InProgress) action is an ordered list of gates. Each gate observes one
// thing and adds it to the facts, or stops the reconcile with one typed wait: the ledger step that records why
// (written with the status writer's Apply; none when nothing changed) and when to look again. After the
// observing gates the ledger makes the one decision of the reconcile (ledger.Advance), and the decision's
// variant carries it out: a send or a post-check passes the gates that make room for it, in the order that
// spends nothing before it is needed (no token before the room, no Secret read before the last wait), and only
// then is the claim written (DESIGN rule 1) and the job handed to the dispatcher (rule 10).
//
// The lists are written once and the variants are composed of them, as Cluster API's machine controller appends
// a phase's functions to its alwaysReconcile list: a gate added to a list holds for every variant that passes
// it. What differs between variants is data: whether a delay is recorded (variant.quiet, wait.quiet) and how
// an attempt holds its claim (claimHold).

// facts is what one reconcile observed of an active action, gate by gate.
type facts struct {
	now  time.Time
	env  ledger.Env
	fp   string
	dest *destination.Resolved
	// unblocked is ledger.Unblock of the stored status (nil: no stall to end), and staleErr the lastError it
	// would leave behind (see unstall).
	unblocked *actionsv1alpha1.ExternalActionStatus
	staleErr  string
	body      []byte
	key       string
	// step is the ledger's decision, and target the URL its send or post-check goes to.
	step   ledger.Step
	target string
}

// wait is what a gate decided instead of going on: step to write (Status nil: nothing to write; its Event is
// emitted after the write), when to look again (0: step.At), the destination to name in logs and metrics, or
// an error for the workqueue. quiet, when set, marks a delay at the destination (no room, its rate limit or
// retry budget): a quiet variant waits that long and writes nothing. result, when set, is a post-check's
// result to record in place of its answer (the check was not asked).
type wait struct {
	step   ledger.Step
	after  time.Duration
	destID string
	err    error
	quiet  time.Duration
	result *send.Result
}

// active is the scope of one reconcile of an active action.
type active struct {
	r  *ExternalActionReconciler
	xa *actionsv1alpha1.ExternalAction
	f  facts
}

type gate func(ctx context.Context) *wait

// variant is how the ledger's step is carried out: the gates it passes after the observing ones, whether its
// delays are waited without a status write (quiet), and what is done once every gate is passed.
type variant struct {
	gates []gate
	// quiet: a delay (wait.quiet) is waited, not recorded. A post-check's status is its own schedule (the
	// uncertain claim it asks about, PostCheckPending); a send's delay is recorded (ConcurrencyLimited,
	// RateLimited, RetryBudgetExhausted; the last two only when longer than send.BriefWait) so that the reason
	// it waits shows.
	quiet bool
	carry func(ctx context.Context) (ctrl.Result, error)
}

// reconcileActive observes xa through the gates, lets the ledger decide, and carries the decision out through
// its variant.
func (r *ExternalActionReconciler) reconcileActive(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	a := &active{r: r, xa: xa, f: facts{now: r.Clock.Now()}}
	if w := a.run(ctx, a.observe()...); w != nil {
		return a.stop(ctx, w, false)
	}
	v := a.variant()
	if w := a.run(ctx, v.gates...); w != nil {
		return a.stop(ctx, w, v.quiet)
	}
	return v.carry(ctx)
}

// observe is the list every reconcile of an active action passes: what it asks, where to, whether its key is
// bound, and the ledger's one decision.
func (a *active) observe() []gate {
	return []gate{a.fingerprint, a.destination, a.spec, a.tombstone, a.decide}
}

// toDestination is the list every request to the destination passes last, a send and a post-check alike, in the
// order that spends nothing before it is needed (send.Passage, which dead-letter deliveries pass too): this
// shard's share of the destination's limits and room in the dispatcher (both in memory: near), then reads of the
// variant's own (no API read while there is no room), and last the destination's Secrets and a token of its rate
// limit and retry budget (far).
func (a *active) toDestination(reads ...gate) []gate {
	return slices.Concat([]gate{a.near}, reads, []gate{a.far})
}

// variant composes the variant of the ledger's step: a send (claimed or not: claimHold) passes its path and its
// subject, then toDestination with its output target; a post-check writes its step, fills in its path, then
// passes toDestination, quiet; any other step is only written.
func (a *active) variant() variant {
	switch a.f.step.Kind {
	case ledger.KindSend:
		return variant{gates: slices.Concat([]gate{a.path, a.subject}, a.toDestination(a.outputTarget)), carry: a.sendAttempt}
	case ledger.KindPostCheck:
		return variant{gates: slices.Concat([]gate{a.checkStep, a.checkPath}, a.toDestination()), quiet: true, carry: a.askCheck}
	case ledger.KindJudge:
		return variant{carry: a.judge}
	}
	// Any other step is written, and requeues from its schedule. A wait this process has parked in its
	// destination's waiting room looks again no earlier than the room's time: a shown wait for a token or the
	// retry budget stores its end in nextAttemptAt, cut to whole seconds on the wire (RFC 3339), so the reconcile
	// of that very status write would look again up to a second before the limiter's time, to be refused once
	// more. The room wakes it at its time; after a restart (nothing parked) the stored time stands.
	return variant{carry: func(ctx context.Context) (ctrl.Result, error) {
		step := a.f.step
		if step.Kind == ledger.KindWait && step.Status == nil {
			step.At = a.r.parts.room.Later(types.NamespacedName{Namespace: a.xa.Namespace, Name: a.xa.Name}, step.At)
		}
		return a.r.apply(ctx, a.xa, step, a.f.dest.ID)
	}}
}

// run passes the gates in order and returns the first wait.
func (a *active) run(ctx context.Context, gates ...gate) *wait {
	for _, g := range gates {
		if w := g(ctx); w != nil {
			return w
		}
	}
	return nil
}

// stop carries out a gate's wait: in a quiet variant a delay is only waited; a post-check's result is recorded
// (recordCheck); any other wait is held (its step written and the requeue it asks).
func (a *active) stop(ctx context.Context, w *wait, quiet bool) (ctrl.Result, error) {
	switch {
	case quiet && w.quiet > 0:
		return ctrl.Result{RequeueAfter: w.quiet}, nil
	case w.result != nil:
		return a.r.settle(ctx, a.xa, w.result)
	}
	return a.r.hold(ctx, a.xa, w)
}

// bare is the decision environment before the destination is known (its retention and deadline are the
// action's own), for what is decided without it.
func (a *active) bare() ledger.Env { return a.r.env(a.xa, nil, a.f.now) }

// fingerprint binds the key to the fingerprint stored at the first claim (DESIGN rule 6).
func (a *active) fingerprint(context.Context) *wait {
	xa := a.xa
	fp, err := fingerprint.Compute(&xa.Spec)
	if err != nil {
		return &wait{step: ledger.Fail(&xa.Status, actionsv1alpha1.ReasonInvalidSpec, err.Error(), a.bare())}
	}
	if xa.Status.Fingerprint != "" && xa.Status.Fingerprint != fp && xa.Status.Claim == nil {
		metrics.FingerprintConflicts.Inc()
		return &wait{step: ledger.Conflict(&xa.Status, conflictMessage(xa, xa.Status.Fingerprint, fp, "this object's first attempt"), a.bare())}
	}
	a.f.fp = fp
	return nil
}

// destination resolves the action's destination (no Secret is read yet) and checks its validator's verdict and
// its post-check's expressions (a destination whose reconciliation expressions are refused holds its actions
// before anything is sent).
func (a *active) destination(ctx context.Context) *wait {
	dest, err := a.r.parts.resolver.Resolve(ctx, a.xa)
	if err == nil {
		err = dest.NotReady()
	}
	if err == nil {
		err = dest.CheckReconciliation(func(src string) error { _, cerr := a.r.Exprs.Get(src); return cerr })
	}
	if err != nil {
		return a.unusable(err)
	}
	a.f.dest = dest
	return nil
}

// unusable records why the destination cannot be used (reason DestinationNotReady, or the more precise
// SecretNotAllowed, NamespaceNotAllowed, InsecureSkipVerifyNotAllowed, EgressDenied, PathOutsideBase) as
// Stalled=True with the phase kept (ledger.Blocked): lastError carries the message (the ERROR column), a retry
// still scheduled stays in nextAttemptAt and a past one is cleared. The wait ends as soon as the destination
// becomes usable: a Destination, ClusterDestination or Namespace watch event wakes the action
// (SetupWithManager), and destination.Recheck is only the fallback.
func (a *active) unusable(err error) *wait {
	xa := a.xa
	reason := destination.Reason(err, actionsv1alpha1.ReasonDestinationNotReady)
	step := ledger.Blocked(&xa.Status, reason, err.Error(), a.bare())
	if step.Status != nil {
		step.Event = &ledger.Event{Warning: true, Reason: reason, Message: err.Error()}
	}
	after := destination.Recheck
	if n := xa.Status.NextAttemptAt; n != nil && n.Sub(a.f.now) > after {
		after = n.Sub(a.f.now)
	}
	return &wait{step: step, after: after}
}

// spec checks what the action asks against its destination (any error is an InvalidSpec, nothing is sent):
// a retry policy that only tightens the destination's, no routing-override header (one stored before admission
// refused them: destination.CheckRequestHeaders), a compilable successWhen and outputs, and a body
// within bounds (kept in canonical form). It builds the reconcile's decision environment.
func (a *active) spec(context.Context) *wait {
	xa, dest := a.xa, a.f.dest
	policy, deadline, err := destination.Tighten(dest.Policy, dest.DeadlineDur, xa.Spec.RetryPolicy)
	if err == nil {
		err = destination.CheckRequestHeaders(xa.Spec.Request.Headers)
	}
	if err == nil {
		_, err = send.SuccessProgram(a.r.Exprs, xa)
	}
	if err == nil {
		err = a.r.parts.outputs.Check(xa)
	}
	if err == nil {
		a.f.body, err = send.RequestBody(xa)
	}
	if err != nil {
		// The destination's retention applies to an action failed for an invalid spec too (else it is collected
		// at once).
		return &wait{step: ledger.Fail(&xa.Status, actionsv1alpha1.ReasonInvalidSpec, err.Error(), a.r.env(xa, dest, a.f.now)),
			destID: dest.ID}
	}
	dest.Policy, dest.DeadlineDur = policy, deadline
	a.f.env = a.r.env(xa, dest, a.f.now)
	// A destination usable again ends a stall (ledger.Blocked): the next status written carries it (unstall).
	// xa.Status itself stays as stored, so that a send refused again (credentials) finds the same stall and
	// writes nothing.
	a.f.unblocked, a.f.staleErr = ledger.Unblock(&xa.Status, a.f.env), xa.Status.LastError
	a.f.key = destination.IdempotencyKey(dest.Spec, xa.Namespace, xa.Name)
	return nil
}

// tombstone, at the first sight of a key, looks up its tombstone: it binds the key beyond the object's life
// (DESIGN rule 7), as a replay or a conflict. A lookup the store cannot answer waits; it never takes the key
// for new.
func (a *active) tombstone(ctx context.Context) *wait {
	xa, f := a.xa, &a.f
	if xa.Status.Fingerprint != "" {
		return nil
	}
	step, done, err := a.r.checkTombstone(ctx, xa, f.key, f.fp, f.env)
	if unknown := (*errTombstoneStore)(nil); errors.As(err, &unknown) {
		return a.r.waitOnTombstoneStore(ctx, xa, unknown, f.env)
	}
	if err != nil {
		return &wait{err: err}
	}
	if done {
		return &wait{step: unstall(step, f.unblocked, f.staleErr), destID: f.dest.ID}
	}
	xa.Status = *ledger.Begin(&xa.Status, f.key, f.fp, f.env)
	return nil
}

// decide is the one decision of the reconcile.
func (a *active) decide(context.Context) *wait {
	a.f.step = unstall(ledger.Advance(&a.xa.Status, a.f.env), a.f.unblocked, a.f.staleErr)
	return nil
}

// path checks that the send never leaves the destination's base path (DESIGN rule 11; the base was checked on
// resolving). Checked here, where no claim is open, so that an uncertain attempt is never dropped by the
// refusal.
func (a *active) path(context.Context) *wait {
	target, err := httpexec.JoinURL(a.f.dest.Spec.URL, a.xa.Spec.Request.Path)
	if err != nil {
		msg := fmt.Sprintf("spec.request.path: %v; nothing was sent. Use a path without \".\" or \"..\" segments "+
			"(in any encoding), encoded \"/\" or backslashes", err)
		return &wait{step: ledger.Fail(&a.xa.Status, actionsv1alpha1.ReasonPathOutsideBase, msg, a.f.env), destID: a.f.dest.ID}
	}
	a.f.target = target
	return nil
}

// subject: the action must hold its subject's Lease before any claim; otherwise it waits, sending nothing.
func (a *active) subject(ctx context.Context) *wait {
	if a.xa.Spec.Subject == "" {
		return nil
	}
	w, err := a.r.parts.subjects.Hold(ctx, a.xa, a.f.now)
	switch {
	case err != nil:
		return &wait{err: err}
	case w == nil:
		return nil
	case w.Reason == "":
		return &wait{after: w.After}
	}
	return &wait{step: ledger.WaitForSubject(&a.xa.Status, w.Reason, w.Message, a.f.env), after: w.After}
}

// near waits out a time the waiting room already holds the action for (without asking again or writing), then
// passes this shard's share of the destination's limits and room in the dispatcher (send.Passage.Near):
// without room the action parks in the destination's waiting room, woken by a completion there
// (ManagerDispatcher.deliver) in round-robin order over namespaces, requeue.Room (jittered) as the safety net;
// the wait sets no nextAttemptAt that would hold a woken action back, and is shown (ConcurrencyLimited, written
// once) only when it has lasted longer than the destination's timeout (send.RoomShown).
func (a *active) near(ctx context.Context) *wait {
	h := a.r.parts.passage.Near(a.f.dest, types.NamespacedName{Namespace: a.xa.Namespace, Name: a.xa.Name}, a.f.now, a.f.env.Rand)
	if h != nil && h.Reason == "" {
		log.FromContext(ctx).V(1).Info("waiting in the destination's waiting room (a time it gave, or this shard's share of its limits)",
			"destination", a.f.dest.ID, "until", h.Until, "wait", h.After)
	}
	return holdWait(a, h)
}

// far reads the destination's Secrets (only right before a send and a post-check) and takes a token of its rate
// limit and retry budget (send.Passage.Far, which dead-letter deliveries pass too): a wait for a token is
// written (RateLimited, RetryBudgetExhausted) only when longer than send.BriefWait and the reason changes, and
// never by a quiet variant.
func (a *active) far(ctx context.Context) *wait {
	first := a.f.step.Kind != ledger.KindSend || a.f.step.Status.Claim.Attempt == 1
	return holdWait(a, a.r.parts.passage.Far(ctx, a.f.dest, types.NamespacedName{Namespace: a.xa.Namespace, Name: a.xa.Name}, first, a.f.now, a.f.env.Rand))
}

// holdWait is the wait of the passage's hold h (nil: none): an unusable destination for a Secret that could not
// be read; else the action is parked in the destination's waiting room, which wakes it when its capacity comes
// (send.Passage), and the wait's requeue is only the hold's safety net (a quiet variant only waits it; a short
// internal wait for the shard's share is never written), its step written only when the hold is shown.
func holdWait(a *active, h *send.Hold) *wait {
	switch {
	case h == nil:
		return nil
	case h.Err != nil:
		return a.unusable(h.Err)
	case h.Reason == "":
		return &wait{after: h.After}
	}
	out := &wait{destID: a.f.dest.ID, after: h.After, quiet: h.After}
	if h.Shown {
		// A wait the room may end sooner (the retry budget) sets no nextAttemptAt that would hold a woken action
		// back, as a wait for room sets none.
		until := h.Until
		if h.Sooner {
			until = time.Time{}
		}
		out.step = ledger.Delayed(&a.xa.Status, h.Reason, h.Message, until, a.f.env)
	}
	return out
}

// outputTarget: an object in the place of spec.outputs' target that this action did not write holds the send
// back, like an unusable destination (Stalled True, reason OutputConflict, a Warning Event), looked at again
// after destination.Recheck (an unlabelled object has no watch).
func (a *active) outputTarget(ctx context.Context) *wait {
	err := a.r.parts.outputs.CheckTarget(ctx, a.xa)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, outputs.ErrConflict):
		return &wait{err: err}
	}
	step := ledger.Blocked(&a.xa.Status, actionsv1alpha1.ReasonOutputConflict, err.Error(), a.f.env)
	if step.Status != nil {
		step.Event = &ledger.Event{Warning: true, Reason: actionsv1alpha1.ReasonOutputConflict, Message: err.Error()}
	}
	return &wait{step: step, after: destination.Recheck}
}

// claimHold is how an attempt holds its claim while it is out: written before the send (DESIGN rule 1), or, for
// an unclaimed step (idempotency.claim WhenUnsafe, a repeat-safe first attempt), in memory only: its job carries
// the claim (send.Sender.UnclaimedJob) and its outcome is recorded on the status as read
// (ledger.RecordUnclaimed). A repeat of an unclaimed attempt cannot make a second effect, and
// ledger.ClaimlessWindow bounds how often a manager that dies before the record can send it again.
type claimHold struct {
	// take returns the action as sent, with the attempt's claim: written (active.claim) or in memory (inMemory).
	take func(ctx context.Context, attempt int32) (*actionsv1alpha1.ExternalAction, error)
	// job is the sender's job constructor for it.
	job func(sent *actionsv1alpha1.ExternalAction, dest *destination.Resolved, target string, body []byte, env ledger.Env,
		margin time.Duration) dispatch.Job[*send.Result]
	// asRead: the outcome is recorded on the status as read, not on the sent copy.
	asRead bool
	// says is the log line of the dispatch.
	says string
}

// claimHold is the step's way to hold its claim (ledger.Step.Unclaimed).
func (a *active) claimHold() claimHold {
	if a.f.step.Unclaimed {
		return claimHold{take: a.inMemory, job: a.r.parts.sender.UnclaimedJob, asRead: true,
			says: "dispatching without a claim (idempotency.claim WhenUnsafe)"}
	}
	return claimHold{take: a.claim, job: a.r.parts.sender.Job, says: "claimed; dispatching"}
}

// sendAttempt holds the attempt's claim (claimHold: a claim lost to a newer version sends nothing) and only then
// hands the send to the dispatcher (DESIGN rule 10). Its outcome, back already or refused by the dispatcher, is
// recorded in this reconcile; otherwise the claim's expiry is the safety net should it never come back.
func (a *active) sendAttempt(ctx context.Context) (ctrl.Result, error) {
	r, f, h := a.r, &a.f, a.claimHold()
	logger := log.FromContext(ctx)
	attempt := f.step.Status.Claim.Attempt
	ctx, span := tracing.Reconcile(ctx, a.xa, f.dest.ID, f.now) // reconcile -> claim (when written) -> attempt (tracing.go)
	defer span.End()
	sent, err := h.take(ctx, attempt)
	if errors.Is(err, status.ErrClaimLost) {
		logger.V(1).Info("claim lost to a newer version; nothing sent", "attempt", attempt)
		return ctrl.Result{RequeueAfter: requeue.ClaimLost}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if attempt > 1 {
		metrics.Retries.WithLabelValues(f.dest.ID).Inc()
	}
	logger.V(1).Info(h.says, "attempt", attempt, "destination", f.dest.ID)
	job := h.job(sent, f.dest, f.target, f.body, f.env, f.env.Margin())
	p, err := r.submit(ctx, tracing.Attempt(ctx, job, destination.Method(a.xa), send.Traced))
	switch {
	case errors.Is(err, dispatch.ErrAlreadyQueued):
		// Not reached (Reconcile waits while the dispatcher holds the key); a claim just written then follows
		// DESIGN rule 3 when it expires. Nothing is sent twice.
		logger.Info("an attempt of this action is still in the dispatcher; not sent again", "attempt", attempt)
		return ctrl.Result{RequeueAfter: requeue.InFlight}, nil
	case p != nil && h.asRead:
		return r.record(ctx, a.xa, p)
	case p != nil:
		return r.record(ctx, sent, p)
	}
	// Safety net: look again when the claim expires, should the outcome never come back.
	return requeue.At(sent.Status.Claim.ExpiresAt.Time, r.Clock.Now()), nil
}

// claim writes the claim of attempt in its span (a child of the reconcile span in ctx; none when tracing is off).
func (a *active) claim(ctx context.Context, attempt int32) (*actionsv1alpha1.ExternalAction, error) {
	ctx, span := tracing.Start(ctx, "claim", attempt)
	defer span.End()
	claimed, err := a.r.parts.writer.Claim(ctx, a.xa, a.f.step)
	tracing.Fail(span, err)
	return claimed, err
}

// inMemory is the action as sent without a claim written: a copy with the step's status, claim included.
func (a *active) inMemory(context.Context, int32) (*actionsv1alpha1.ExternalAction, error) {
	sent := a.xa.DeepCopy()
	sent.Status = *a.f.step.Status
	return sent, nil
}

// checkStep writes a post-check's step (InProgress, PostCheckPending, the uncertain attempt in the history) before
// the check is asked, and goes on with the written copy; a Conflict observes again.
func (a *active) checkStep(ctx context.Context) *wait {
	if a.f.step.Status == nil {
		return nil
	}
	upd, err := a.r.parts.writer.Apply(ctx, a.xa, a.f.step, a.f.dest.ID)
	switch {
	case err != nil:
		return &wait{err: err}
	case upd == nil: // a Conflict
		return &wait{after: requeue.At(a.f.step.At, a.f.now).RequeueAfter}
	}
	a.xa = upd
	return nil
}

// checkPath fills in the post-check's path under the destination's base path (send.CheckTarget). A path that
// leaves it is not asked: the check counts as inconclusive, so the action ends OutcomeUnknown (DESIGN rule 3).
func (a *active) checkPath(ctx context.Context) *wait {
	target, err := send.CheckTarget(a.xa, a.f.dest)
	if err == nil {
		a.f.target = target
		return nil
	}
	attempt := a.xa.Status.Claim.Attempt
	log.FromContext(ctx).Info("post-check not sent: its path leaves the destination's base path", "attempt", attempt,
		"reason", actionsv1alpha1.ReasonPathOutsideBase, "error", err.Error())
	return &wait{result: &send.Result{Attempt: attempt, Env: a.f.env, Check: &send.CheckResult{Verdict: ledger.VerdictInconclusive}}}
}

// askCheck asks the destination's reconciliation post-check about an uncertain attempt (DESIGN rule 3). The
// request goes through the dispatcher like a send (it holds no reconcile worker and counts against the
// destination's maxInFlight); its verdict comes back like an outcome and is recorded by recordCheck.
func (a *active) askCheck(ctx context.Context) (ctrl.Result, error) {
	r := a.r
	job := r.parts.sender.CheckJob(a.xa, a.f.dest, a.f.target, a.f.env)
	p, err := r.submit(ctx, job)
	switch {
	case err != nil:
		// Stopping, or already held: nothing was asked; the next reconcile decides again.
		log.FromContext(ctx).V(1).Info("post-check not dispatched; asking again later", "error", err.Error())
		return ctrl.Result{RequeueAfter: requeue.NotDispatched}, nil
	case p != nil:
		return r.settle(ctx, a.xa, p)
	}
	return ctrl.Result{RequeueAfter: job.Deadline.Sub(r.Clock.Now()) + requeue.NotDispatched}, nil
}

// judge evaluates spec.successWhen again on the response recorded for the open claim, whose verdict is pending
// (status.claim.verdict, DESIGN rule 12), and records the result as the attempt's outcome (record: held in the
// mailbox until written, DESIGN rule 2). Nothing is sent, and no room, token or Secret is needed.
func (a *active) judge(ctx context.Context) (ctrl.Result, error) {
	nn := types.NamespacedName{Namespace: a.xa.Namespace, Name: a.xa.Name}
	hctx, release, ok := expr.HoldSlot(ctx, nn.Namespace, nn.String(), func() { a.r.parts.wake(nn) })
	if !ok { // its place in its namespace's queue of evaluations: woken when its turn comes
		return ctrl.Result{RequeueAfter: requeue.Room/2 + time.Duration(a.f.env.Rand()*float64(requeue.Room))}, nil
	}
	o := a.r.parts.sender.Judge(hctx, a.xa)
	release()
	env := a.f.env
	env.Now = a.f.now
	c := a.xa.Status.Claim
	log.FromContext(ctx).V(1).Info("judging a recorded response again", "attempt", c.Attempt, "result", string(o.Class))
	return a.r.record(ctx, a.xa, &send.Result{Attempt: c.Attempt, Outcome: o, Env: env, ClaimedAt: c.StartedAt.Time,
		PauseCap: a.f.dest.DeadlineDur})
}

// unstall makes step end a stall on the destination when unblocked (ledger.Unblock of the stored status) is
// not nil: a step that writes nothing writes unblocked (a claim step always writes), and a written status
// drops the stall's message from lastError (staleErr), which ledger.Blocked put there.
func unstall(step ledger.Step, unblocked *actionsv1alpha1.ExternalActionStatus, staleErr string) ledger.Step {
	if unblocked == nil {
		return step
	}
	if step.Status == nil {
		step.Status = unblocked.DeepCopy()
		return step
	}
	if staleErr != "" && step.Status.LastError == staleErr {
		step.Status.LastError = ""
	}
	return step
}

func conflictMessage(xa *actionsv1alpha1.ExternalAction, bound, got, where string) string {
	return fmt.Sprintf("the key %s/%s is bound to fingerprint %s by %s, but this spec has fingerprint %s; nothing was sent. "+
		"The name is the idempotency key: to perform a different action, create a new ExternalAction with a new name",
		xa.Namespace, xa.Name, bound, where, got)
}
