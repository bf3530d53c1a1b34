package plugin

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// DestinationState is what "why" knows about the action's destination when the action waits on it.
type DestinationState struct {
	// Kind and Name are the action's spec.destinationRef.
	Kind, Name string
	// Found is false when the Destination or ClusterDestination does not exist.
	Found bool
	// Ready is its Ready condition, when it has one.
	Ready *metav1.Condition
}

// destinationReasons are the condition reasons of an action that waits because of its destination.
var destinationReasons = map[string]bool{
	actionsv1alpha1.ReasonDestinationNotReady:          true,
	actionsv1alpha1.ReasonNamespaceNotAllowed:          true,
	actionsv1alpha1.ReasonSecretNotAllowed:             true,
	actionsv1alpha1.ReasonEgressDenied:                 true,
	actionsv1alpha1.ReasonInsecureSkipVerifyNotAllowed: true,
}

// WaitsOnDestination reports whether the action's conditions say it waits because of its destination, so
// that "why" reads the destination too.

// The kinds an ExternalAction's spec.destinationRef names.
const (
	kindDestination        = "Destination"
	kindClusterDestination = "ClusterDestination"
)

func WaitsOnDestination(xa *actionsv1alpha1.ExternalAction) bool {
	c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReady)
	return c != nil && destinationReasons[c.Reason] && !xa.Status.Phase.Terminal()
}

// explainSucceeded says how a Succeeded action got its outcome and when it goes.
func explainSucceeded(say func(string, ...any), st *actionsv1alpha1.ExternalActionStatus, now time.Time) {
	switch {
	case st.ReplayedFrom != nil:
		say("Its outcome was replayed from the tombstone of an earlier object with the same key and fingerprint (uid %s); nothing was sent.", st.ReplayedFrom.UID)
	case st.Resolution != nil:
		say("A person decided %q at %s%s; nothing was sent for that decision.", st.Resolution.Decision, stamp(st.Resolution.At.Time), reasonText(st.Resolution.Reason))
	case st.Response != nil:
		say("The destination answered %d after %d attempt(s).", st.Response.StatusCode, st.Attempts)
	}
	explainRetention(say, st, now)
	if c := meta.FindStatusCondition(st.Conditions, actionsv1alpha1.ConditionOutputsReady); c != nil {
		switch {
		case c.Status == metav1.ConditionTrue:
			say("Its outputs are in %s (keys %s).", outputsRef(st), strings.Join(st.Outputs.Keys, ", "))
		case c.Reason == actionsv1alpha1.ReasonOutputsPending:
			say("Its outputs are being written; Ready follows once they are.")
			return
		default:
			say("Its outputs are not available (%s): %s.", c.Reason, strings.TrimSuffix(c.Message, "."))
			say("Nothing is sent again for them; see docs/outputs.md.")
			return
		}
	}
	say("Nothing to do.")
}

// outputsRef names status.outputs' object, or "the target" before it is recorded.
func outputsRef(st *actionsv1alpha1.ExternalActionStatus) string {
	if st.Outputs == nil {
		return "the target"
	}
	return st.Outputs.Kind + " " + st.Outputs.Name
}

// Explain says in plain words what state xa is in and what to do next, one sentence per line. dest is read
// only when WaitsOnDestination(xa) (nil otherwise). now is the clock for "in 12s" and expired claims.
func Explain(xa *actionsv1alpha1.ExternalAction, dest *DestinationState, now time.Time) []string {
	e := newExplainer(xa, now)
	head := fmt.Sprintf("ExternalAction %s/%s is %s", xa.Namespace, e.name, e.phase)
	if e.reason != "" && e.reason != string(e.phase) {
		head += " (" + e.reason + ")"
	}
	e.say("%s.", head)
	if e.message != "" {
		e.say("Controller: %s.", strings.TrimSuffix(e.message, "."))
	}
	if d, ok := xa.Annotations[actionsv1alpha1.AnnotationResolve]; ok {
		e.say("A decision %q is set in the annotation %s and waits for the controller to record it.", d, actionsv1alpha1.AnnotationResolve)
	}
	switch e.phase {
	case actionsv1alpha1.PhasePending, actionsv1alpha1.PhaseInProgress:
		e.active(dest)
	case actionsv1alpha1.PhaseSucceeded:
		explainSucceeded(e.say, e.st, now)
	case actionsv1alpha1.PhaseFailed:
		e.failed()
	default:
		e.undecided()
	}
	return e.out
}

// explainer collects the sentences of one Explain.
type explainer struct {
	xa              *actionsv1alpha1.ExternalAction
	st              *actionsv1alpha1.ExternalActionStatus
	name, key       string
	phase           actionsv1alpha1.Phase
	ready           *metav1.Condition
	reason, message string
	now             time.Time
	out             []string
}

func newExplainer(xa *actionsv1alpha1.ExternalAction, now time.Time) *explainer {
	e := &explainer{xa: xa, st: &xa.Status, name: xa.Name, key: xa.Status.IdempotencyKey, phase: xa.Status.Phase, now: now}
	e.ready = meta.FindStatusCondition(e.st.Conditions, actionsv1alpha1.ConditionReady)
	if e.ready != nil {
		e.reason, e.message = e.ready.Reason, e.ready.Message
	}
	if e.key == "" {
		e.key = xa.Namespace + "/" + xa.Name
	}
	if e.phase == "" {
		e.phase = actionsv1alpha1.PhasePending
	}
	return e
}

func (e *explainer) say(format string, a ...any) { e.out = append(e.out, fmt.Sprintf(format, a...)) }

// lastError says lastError, which repeats the condition message in most phases, only when it adds something.
func (e *explainer) lastError(label string) {
	if e.st.LastError != "" && !strings.Contains(e.message, e.st.LastError) {
		e.say("%s: %s.", label, strings.TrimSuffix(e.st.LastError, "."))
	}
}

func (e *explainer) resolveHint() {
	e.say("Decide with one of:")
	e.say("  kubectl actionledger resolve %s applied --reason '...'      # it happened: mark Succeeded, send nothing", e.name)
	e.say("  kubectl actionledger resolve %s not-applied --reason '...'  # it did not happen: mark Failed", e.name)
	e.say("  kubectl actionledger resolve %s retry --reason '...'        # send once more under the key %s", e.name, e.key)
}

// active explains a Pending or InProgress action.
func (e *explainer) active(dest *DestinationState) {
	st, xa, reason := e.st, e.xa, e.reason
	switch {
	case st.Phase == "" && e.ready == nil:
		e.say("The controller has not recorded anything yet: check that the actionledger manager is running and watching namespace %s.", xa.Namespace)
	case destinationReasons[reason]:
		explainDestination(e.say, xa, dest, reason)
	case reason == actionsv1alpha1.ReasonWaitingForSubject || reason == actionsv1alpha1.ReasonSubjectOutcomeUnknown:
		explainSubject(e.say, xa, reason, e.message)
	case reason == actionsv1alpha1.ReasonOutputConflict:
		e.say("Nothing is sent: %s.", strings.TrimSuffix(e.message, "."))
	case st.Claim != nil:
		explainClaim(e.say, st.Claim, e.now)
	default:
		e.lastError("Last error")
		if st.NextAttemptAt != nil {
			e.say("The next attempt (%d) is due at %s (%s); nothing is sent before then.", st.Attempts+1,
				stamp(st.NextAttemptAt.Time), until(e.now, st.NextAttemptAt.Time))
		}
		if st.Deadline != nil {
			e.say("The overall deadline is %s (%s); after it the action ends Exhausted.", stamp(st.Deadline.Time), until(e.now, st.Deadline.Time))
		}
		e.say("Nothing to do: wait, or follow it with kubectl actionledger history %s.", e.name)
	}
}

// failed explains a Failed action.
func (e *explainer) failed() {
	st := e.st
	switch {
	case st.Resolution != nil:
		e.say("A person decided %q at %s%s.", st.Resolution.Decision, stamp(st.Resolution.At.Time), reasonText(st.Resolution.Reason))
	case e.reason == actionsv1alpha1.ReasonInvalidSpec || e.reason == actionsv1alpha1.ReasonPathOutsideBase:
		e.say("The spec cannot be sent as written; nothing was sent. Fix it and create it under a new name (the fields are immutable).")
	case st.Response != nil:
		e.say("The destination rejected it with status %d; a rejection is the outcome and is not retried.", st.Response.StatusCode)
	}
	e.lastError("Last error")
	explainRetention(e.say, st, e.now)
	e.say("Failed is final. To perform the action anyway, create a new ExternalAction with a new name.")
}

// undecided explains an OutcomeUnknown, Exhausted or Conflict action: what a person can decide.
func (e *explainer) undecided() {
	st, name := e.st, e.name
	switch e.phase {
	case actionsv1alpha1.PhaseOutcomeUnknown:
		e.say("Attempt %d may or may not have been applied by the destination, and nothing can prove it either way; it is never re-sent by itself.", st.Attempts)
		e.lastError("Last error")
		e.say("Look up the key %s in the destination's own records, then decide. It is not collected until you do.", e.key)
		e.resolveHint()
	case actionsv1alpha1.PhaseExhausted:
		e.say("It stopped after %d attempt(s): attempts, retry budget or deadline ran out.", st.Attempts)
		e.lastError("Last error")
		explainRetention(e.say, st, e.now)
		e.say("Fix the cause (the last error), then ask for one more attempt:")
		e.say("  kubectl actionledger resolve %s retry --reason '...'", name)
		e.say("or close it with resolve %s not-applied (or applied, if you know it happened).", name)
	case actionsv1alpha1.PhaseConflict:
		e.say("Its name, the idempotency key %s, is already bound to another request (a live object or the tombstone of an earlier one); nothing was sent.", e.key)
		e.lastError("Detail")
		e.say("Use a new name for a new action. Deleting this object leaves no tombstone and does not disturb the earlier binding.")
	}
}

func explainDestination(say func(string, ...any), xa *actionsv1alpha1.ExternalAction, dest *DestinationState, reason string) {
	kind, name := xa.Spec.DestinationRef.Kind, xa.Spec.DestinationRef.Name
	if kind == "" {
		kind = kindDestination
	}
	ref := kind + " " + name
	if kind == kindDestination {
		ref += " in namespace " + xa.Namespace
	}
	say("Nothing is sent while its destination cannot be used.")
	switch {
	case reason == actionsv1alpha1.ReasonNamespaceNotAllowed:
		say("The %s does not allow namespace %s (its namespaceSelector does not match the namespace's labels): ask its owner, or label the namespace.", ref, xa.Namespace)
	case dest != nil && !dest.Found:
		say("The %s does not exist. Create it, or, if spec.destinationRef is mistyped, delete this action and create it again with the right destinationRef.", ref)
	case dest != nil && dest.Ready != nil && dest.Ready.Status != metav1.ConditionTrue:
		say("The %s is not Ready (%s): %s.", ref, dest.Ready.Reason, strings.TrimSuffix(dest.Ready.Message, "."))
		say("Fix it (kubectl describe %s %s); the action resumes by itself once it is Ready.", strings.ToLower(kind), name)
	default:
		say("Check the %s's Ready condition (kubectl describe %s %s); the action resumes by itself once it is usable.", ref, strings.ToLower(kind), name)
	}
}

func explainRetention(say func(string, ...any), st *actionsv1alpha1.ExternalActionStatus, now time.Time) {
	if st.ExpiresAt != nil {
		say("The object is collected at %s (%s); a tombstone then keeps its key and outcome.", stamp(st.ExpiresAt.Time), until(now, st.ExpiresAt.Time))
	}
}

func reasonText(r string) string {
	if r == "" {
		return ""
	}
	return " (reason: " + r + ")"
}

// stamp renders t as RFC 3339 in UTC, as kubectl prints times.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// until renders t relative to now: "in 12s" or "3m ago".
func until(now, t time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d >= 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

// Why prints Explain for the named action, or, when the object is gone, what its tombstone still binds.
func (p *Plugin) Why(ctx context.Context, name string) error {
	xa := &actionsv1alpha1.ExternalAction{}
	err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, xa)
	if apierrors.IsNotFound(err) {
		return p.whyGone(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("reading externalaction %s/%s: %w", p.Namespace, name, err)
	}
	var dest *DestinationState
	if WaitsOnDestination(xa) {
		if dest, err = p.destinationState(ctx, xa); err != nil {
			return err
		}
	}
	for _, l := range Explain(xa, dest, p.now()) {
		_, _ = fmt.Fprintln(p.Out, l)
	}
	return nil
}

func (p *Plugin) whyGone(ctx context.Context, name string) error {
	ts := &actionsv1alpha1.ActionTombstone{}
	err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, ts)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("externalaction %s/%s not found, and no tombstone holds its key: the name is free", p.Namespace, name)
	}
	if err != nil {
		return fmt.Errorf("reading actiontombstone %s/%s: %w", p.Namespace, name, err)
	}
	_, _ = fmt.Fprintf(p.Out, "ExternalAction %s/%s is gone; its tombstone keeps the key %s bound until %s (%s).\n",
		p.Namespace, name, ts.Spec.Key, stamp(ts.Spec.ExpiresAt.Time), until(p.now(), ts.Spec.ExpiresAt.Time))
	code := ""
	if ts.Spec.StatusCode != 0 {
		code = fmt.Sprintf(", status %d", ts.Spec.StatusCode)
	}
	_, _ = fmt.Fprintf(p.Out, "It ended %s%s, with fingerprint %s.\n", ts.Spec.Phase, code, ts.Spec.Fingerprint)
	_, _ = fmt.Fprintln(p.Out, "Re-creating it with the same spec replays that outcome without a send; a different spec ends Conflict. "+
		"kubectl actionledger check -f FILE tells which.")
	return nil
}

func (p *Plugin) destinationState(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (*DestinationState, error) {
	ds := &DestinationState{Kind: xa.Spec.DestinationRef.Kind, Name: xa.Spec.DestinationRef.Name, Found: true}
	var conds []metav1.Condition
	var err error
	if ds.Kind == kindClusterDestination {
		d := &actionsv1alpha1.ClusterDestination{}
		err = p.Client.Get(ctx, client.ObjectKey{Name: ds.Name}, d)
		conds = d.Status.Conditions
	} else {
		d := &actionsv1alpha1.Destination{}
		err = p.Client.Get(ctx, client.ObjectKey{Namespace: xa.Namespace, Name: ds.Name}, d)
		conds = d.Status.Conditions
	}
	switch {
	case apierrors.IsNotFound(err):
		ds.Found = false
	case apierrors.IsForbidden(err):
		_, _ = fmt.Fprintf(p.ErrOut, "warning: you may not read the %s %s: %v\n", ds.Kind, ds.Name, err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the destination %s: %w", ds.Name, err)
	}
	ds.Ready = meta.FindStatusCondition(conds, actionsv1alpha1.ConditionReady)
	return ds, nil
}

// subjectHolderName finds the name of the other action in a WaitingForSubject or SubjectOutcomeUnknown
// condition message (the controller writes "... ExternalAction <name> ..."); "" when it names none.
var subjectHolderName = regexp.MustCompile(`ExternalAction ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)`)

// explainSubject says why an action with spec.subject sends nothing yet, and what to do about it.
func explainSubject(say func(string, ...any), xa *actionsv1alpha1.ExternalAction, reason, message string) {
	other := "the action named above"
	if m := subjectHolderName.FindStringSubmatch(message); m != nil {
		other = m[1]
	}
	say("Actions of namespace %s that share the subject %q run one at a time, in creation order; this one has sent nothing.",
		xa.Namespace, xa.Spec.Subject)
	if reason == actionsv1alpha1.ReasonSubjectOutcomeUnknown {
		say("It is Stalled: %s holds the subject and its outcome is unknown, so nothing can go after it until a person decides it.", other)
		say("See what to decide with:")
		say("  kubectl actionledger why %s -n %s", other, xa.Namespace)
		say("This one resumes by itself once %s is resolved or deleted.", other)
		return
	}
	say("It goes once %s finishes, is resolved or is deleted. Nothing to do: wait.", other)
}

// explainClaim says what an open claim means: a send whose outcome is not recorded yet, or (past its expiry)
// an attempt the controller must settle.
func explainClaim(say func(string, ...any), c *actionsv1alpha1.AttemptClaim, now time.Time) {
	if now.Before(c.ExpiresAt.Time) {
		say("Attempt %d was sent at %s by %s and its outcome is not recorded yet; the claim expires at %s (%s).",
			c.Attempt, stamp(c.StartedAt.Time), c.Holder, stamp(c.ExpiresAt.Time), until(now, c.ExpiresAt.Time))
		say("Nothing to do: wait.")
		return
	}
	say("Attempt %d was sent at %s and its claim expired at %s without a recorded outcome.", c.Attempt,
		stamp(c.StartedAt.Time), stamp(c.ExpiresAt.Time))
	say("The controller settles it: it re-sends only when repeating is safe, asks the destination's post-check if there is one, and otherwise stops in OutcomeUnknown. If this stays, check that the manager is running.")
}
