// Package dispatch runs claimed attempts outside the reconcile workers (DESIGN rule 10: a send never holds
// a reconcile worker).
//
// The dispatcher knows nothing of the ledger. A Job carries the identity of one claimed attempt
// (destination, action key namespace/name, attempt number), a context deadline, and Run: a closure that
// performs that one attempt (through httpexec) and classifies it. The dispatcher decides only when Run
// starts, and hands every accepted job back exactly once, as a Completion, to the Deliver callback.
//
// # How the controller uses it
//
//  1. Reconcile decides to send, optionally asks HasRoom (so that a claim is not written for a job that
//     would wait behind a full round of sends), writes the claim (DESIGN rule 1), then calls Submit and
//     returns at once. Deadline is the claim's expiry minus the claim margin, so the attempt ends before
//     the claim can be taken for abandoned. Run sends through httpexec and classifies; NotRun turns
//     ErrShutdown or ErrStartDeadline into a not-sent outcome (nothing left), ErrRunPanicked into an
//     uncertain one.
//  2. Deliver stores the outcome in the controller's in-memory pending map (DESIGN rule 2), then puts an
//     event.GenericEvent for the object on the channel of a controller-runtime source.Channel
//     (sigs.k8s.io/controller-runtime/pkg/source) watched by the controller.
//  3. That event enqueues the object; the next Reconcile finds the pending outcome first and records it.
//
// Submit refuses a key that is still queued or running (ErrAlreadyQueued), and the key stays taken until
// Deliver has returned, so a requeue of the object between the claim and the record never sends twice.
//
// # Concurrency and fairness
//
// Each destination has its own queue and its own limit of sends in flight (Job.MaxInFlight, default
// DefaultMaxInFlight, at most MaxMaxInFlight and at most the global limit), shared by every namespace
// that uses it. Queued jobs of one destination are served round-robin over the namespaces that have
// queued jobs (the namespace with the fewest sends in flight first), FIFO inside a namespace; a namespace that has nothing queued earns no credit. This is the
// order of the start-time fair queue of package limiter for jobs of equal cost (one send each), kept
// here as a ring of per-namespace FIFOs because the jobs themselves are present: a tenant with 1,000
// queued jobs delays another tenant's single job by at most one send of each other namespace.
//
// Options.MaxInFlight (default DefaultGlobalMaxInFlight) bounds the sends of the whole manager; it is the
// only resource destinations share. A destination never runs more than its own limit, so a slow
// destination cannot delay another one until the global pool is full. When it is, each freed slot goes to
// the namespace with the fewest sends in flight among those with a job that can start (on a destination
// with a free slot of its own), the longest unserved among equals; it starts its next job on its
// destinations in turn. So the pool is shared max-min fairly over namespaces (tenants), not over
// destinations: a tenant with sixteen Destinations of its own, saturated, holds no more of a freed pool than
// a tenant with one (DESIGN rule 13; the same order serves one destination's queue).
//
// Options.Budget, when set, is the process's byte budget (internal/membudget): a job starts only when its Bytes
// (what its send will hold) fit, taken before Run and given back when it returns, so a send that cannot get its
// bytes waits in its queue before it is sent, never fails after (one still waiting at its StartBy is handed back
// not started). Bytes given back by anyone (a decoder's window) start the jobs that waited for them. With the
// budget the namespace served first is the one with the smallest dominant share, the larger of its part of the
// global pool and its part of the budget (dominant resource fairness, Ghodsi et al., NSDI 2011), so a tenant whose
// sends hold large bodies does not take another's turn.
//
// # Shutdown and leadership
//
// Dispatcher is a manager.Runnable that needs leader election. When the context given to Start is done
// (SIGTERM, or leadership lost), no new send starts: every queued job is handed back at once, not
// started, with ErrShutdown (the request never left: the controller may record a truthful not-sent
// attempt if it can still write; if it cannot, the open claim follows DESIGN rule 3 after a restart).
// Jobs already running are awaited up to Options.ShutdownGrace (default DefaultShutdownGrace); then their
// contexts are cancelled, and Start returns when every Run has returned and been delivered. Completions
// handed back after the stop began have Draining set: the controller's workers are stopping too, so the
// controller records those directly instead of through the workqueue. The manager's
// GracefulShutdownTimeout must exceed ShutdownGrace plus the time to record.
package dispatch
