// Package limiter is the per-destination admission control of actionledger
// (DESIGN rule 5, CONTRACT rateLimit and retryBudget, case C11).
//
// A Registry holds one state per destination (the provider's real boundary),
// shared by every action that uses it:
//
//   - a token bucket (golang.org/x/time/rate) of RequestsPerSecond and Burst:
//     in any interval of length L at most Burst + RequestsPerSecond*L requests
//     are admitted;
//   - a pause: a 429/503 Retry-After stops the whole destination until it ends;
//   - a retry budget (Finagle/Envoy style): retries admitted in a sliding window
//     are at most RetryPercent% of the first attempts admitted in that window plus
//     MinRetriesPerSecond*window;
//   - a fair queue of waiting keys, so that namespaces (tenants) share the rate;
//     and a second one of the retries waiting for the retry budget, each told
//     to come back when the budget fits it and every retry ahead of it, so
//     retries refused together come back one after the other as it refills
//     rather than all at the first refill, to be refused again but one. Those
//     times assume no new first attempts; a first attempt raises the budget, and
//     the waiters it then fits are handed to a wake function at once, and the
//     next waiters' times are brought forward as the queue moves
//     (Registry.WakesEarly): capacity wakes as many as it fits. The budget is not
//     held for a waiter whose time has come (the first woken to ask takes it, but
//     not a retry that has not waited yet); a waiter more than a second late keeps
//     its place for 30 s from the first time it was late, and the next ones are
//     woken at the destination's next admission.
//
// Nothing blocks: the reconciler asks with Admit and either sends now or
// requeues after the returned wait. A key that has to wait gets a reservation,
// its place in the queue, and keeps it when it asks again; asking again never
// consumes more capacity. A reservation that is not claimed within a grace
// period after the time it was told to come back goes late, so an action that
// went away cannot hold the destination; a late key that asks again within 30 s
// takes its place again, so a key slower than the grace (a busy manager) is not
// sent to the back of the queue each time.
//
// # Fairness: start-time fair queuing over namespaces
//
// Every waiting key carries a start tag. A key that starts waiting in namespace
// ns gets tag = max(V, last(ns)+1), where last(ns) is the tag of the newest key
// of ns still waiting and V is the largest tag admitted so far on the
// destination (the virtual clock). A namespace's keys therefore take
// consecutive tags (FIFO inside the namespace), while a namespace that starts
// waiting later starts at the current virtual time instead of behind the whole
// backlog: with namespace A holding tags 5..99 and namespace B arriving with
// tags 4..8, the service order is B A B A ... (round-robin among the
// namespaces that have waiting keys). An idle namespace earns no credit: its
// next key starts at V again. Ties are broken by arrival order.
//
// The position p of a key is the number of waiting keys with a smaller
// (tag, arrival) pair. A key is admitted when p+1 tokens are available, that is
// when every key ahead of it can still be served from the tokens already in the
// bucket; then it consumes one token. Otherwise it is told to come back when
// p+1 tokens will have accrued, assuming those ahead claim theirs on time.
//
// Every decision takes the current time as a parameter; the package never reads
// the clock, so tests drive a simulated timeline. Time is clamped to be
// non-decreasing per destination, so callers racing with slightly different
// clocks cannot mint tokens.
package limiter
