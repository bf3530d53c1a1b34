// Package subject implements spec.subject: one action at a time per subject and namespace, held by a
// coordination.k8s.io/v1 Lease taken before every claim.
package subject

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/metrics"
)

// How spec.subject works (docs/concepts.md, "One action at a time per subject"):
//
//   - The hold is a coordination.k8s.io/v1 Lease per namespace and subject, named LeaseName(subject), whose
//     holderIdentity is "<name>/<uid>" of the holding action. It is taken before every claim (Hold) with
//     an optimistic-concurrency write: a Create when there is none, else an Update carrying the resourceVersion it
//     was read at (a take-over from a holder that is gone or finished, or a touch of our own hold). Two actions, on
//     any number of managers with any cache lag, cannot both win: the API server serializes writes to one object.
//     The claim (DESIGN rule 1) is written only after the hold is ours, so an attempt is only ever in flight under
//     the hold.
//   - The hold ends when the holder's outcome is terminal and recorded, except OutcomeUnknown (Release,
//     from the status writer's Finished hook and reconcileTerminal), and when the holder is finalized. The release is a Delete
//     with UID and resourceVersion preconditions. A missed release costs nothing: the next action takes the Lease
//     over once a fresh read shows its holder gone, or terminal (not OutcomeUnknown) without an open claim.
//   - Creation order is best effort: before it takes the Lease, an action waits for any earlier-created
//     (creationTimestamp, then name) unfinished action on the subject that the cache shows. The Lease, not the
//     cache, keeps two from being in flight at once.

// Lock takes and releases subject Leases. Set Client, APIReader and Clock; the zero value of the rest is ready.
type Lock struct {
	// Client writes Leases and lists actions from the cache (the Field index).
	Client client.Client
	// APIReader reads Leases and holders live from the API server.
	APIReader client.Reader
	Clock     clock.PassiveClock

	// waits holds when this manager first saw an action wait for its subject (wait-time metric).
	waits sync.Map // types.NamespacedName -> time.Time
}

// Forget drops what is held for nn (the object is gone).
func (l *Lock) Forget(nn types.NamespacedName) { l.waits.Delete(nn) }

const (
	// Field indexes ExternalActions in the cache by spec.subject (actions without one are not indexed).
	Field = "spec.subject"
	// WaitField indexes waiting ExternalActions by their wait reason (WaitingForSubject or
	// SubjectOutcomeUnknown), so that the gauges read only them.
	WaitField = "status.subjectWait"

	// LeasePrefix starts the name of every subject Lease.
	LeasePrefix = "xa-subject-"
	// LabelHash labels a subject Lease with the 20 hex digits of its name (a label value cannot hold the
	// subject itself, which may contain "/").
	LabelHash = "actions.actionledger.dev/subject-hash"
	// Annotation carries the subject on its Lease, in full.
	Annotation = "actions.actionledger.dev/subject"

	// recheck is how often a waiting action looks again without a watch event (a safety net).
	recheck = 30 * time.Second
	// takeRetry is how soon Hold is tried again after subjectTakeTries lost races for the Lease.
	takeRetry = 200 * time.Millisecond
	// subjectTakeTries bounds the optimistic-concurrency writes of one Hold call.
	subjectTakeTries = 4
	// releaseTimeout bounds a release made outside a reconcile's own context.
	releaseTimeout = 5 * time.Second
)

// LeaseName is the Lease that holds subject in its namespace: "xa-subject-" and the first 20 hex digits
// (80 bits) of the SHA-256 of the subject.
func LeaseName(subject string) string {
	return LeasePrefix + subjectHash(subject)
}

func subjectHash(subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return hex.EncodeToString(sum[:])[:20]
}

// holderIdentity is the Lease holderIdentity of xa: "<name>/<uid>", so that a re-created object with the same
// name is not mistaken for the holder.
func holderIdentity(xa *actionsv1alpha1.ExternalAction) string {
	return xa.Name + "/" + string(xa.UID)
}

// subjectWaitReason is the wait reason of xa's Ready condition, or "" when it does not wait for its subject.
func subjectWaitReason(xa *actionsv1alpha1.ExternalAction) string {
	if xa.Spec.Subject == "" || xa.Status.Phase.Terminal() {
		return ""
	}
	c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReady)
	if c == nil || (c.Reason != actionsv1alpha1.ReasonWaitingForSubject && c.Reason != actionsv1alpha1.ReasonSubjectOutcomeUnknown) {
		return ""
	}
	return c.Reason
}

// Index registers Field and WaitField with the manager's cache.
func Index(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &actionsv1alpha1.ExternalAction{}, Field, func(o client.Object) []string {
		if xa, ok := o.(*actionsv1alpha1.ExternalAction); ok && xa.Spec.Subject != "" {
			return []string{xa.Spec.Subject}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing ExternalActions by %s: %w", Field, err)
	}
	if err := idx.IndexField(ctx, &actionsv1alpha1.ExternalAction{}, WaitField, func(o client.Object) []string {
		if xa, ok := o.(*actionsv1alpha1.ExternalAction); ok {
			if r := subjectWaitReason(xa); r != "" {
				return []string{r}
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing ExternalActions by %s: %w", WaitField, err)
	}
	return nil
}

// Hold makes sure xa holds its subject before a claim. A nil Wait and nil error: the Lease names xa, written by
// this call with optimistic concurrency. A Wait: xa waits (for whom, and when to look again); nothing may be
// claimed or sent.
func (l *Lock) Hold(ctx context.Context, xa *actionsv1alpha1.ExternalAction, now time.Time) (*Wait, error) {
	nn := types.NamespacedName{Namespace: xa.Namespace, Name: LeaseName(xa.Spec.Subject)}
	for range subjectTakeTries {
		lease := &coordinationv1.Lease{}
		if err := l.APIReader.Get(ctx, nn, lease); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("reading the Lease of subject %q: %w", xa.Spec.Subject, err)
			}
			lease = nil
		}
		ours := lease != nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == holderIdentity(xa)
		if !ours {
			// Creation order (best effort, from the cache): an earlier unfinished action goes first. Not asked
			// when xa holds the Lease already, so that the holder never waits for an action that waits for it.
			if first, err := l.firstInLine(ctx, xa); err != nil || first != nil {
				if err != nil {
					return nil, err
				}
				return l.wait(ctx, xa, first, false, now), nil
			}
		}
		var werr error
		switch {
		case lease == nil:
			werr = l.Client.Create(ctx, l.newLease(xa, nn))
		case ours:
			// A touch with the resourceVersion read: a take-over decided on an older version loses (and one
			// decided on this version wins, and this claim waits).
			lease.Spec.RenewTime = ptrMicro(now)
			werr = l.Client.Update(ctx, lease)
		default:
			holder, free, err := l.holder(ctx, lease)
			if err != nil {
				return nil, err
			}
			if !free {
				return l.wait(ctx, xa, holder, true, now), nil
			}
			werr = l.takeOver(ctx, xa, lease, now)
		}
		switch {
		case werr == nil:
			l.taken(xa, now)
			return nil, nil
		case apierrors.IsAlreadyExists(werr), apierrors.IsConflict(werr), apierrors.IsNotFound(werr):
			continue // another writer moved first: read again and decide again
		default:
			return nil, fmt.Errorf("taking the Lease of subject %q: %w", xa.Spec.Subject, werr)
		}
	}
	return &Wait{After: takeRetry}, nil
}

// takeOver makes xa the holder of lease, whose holder is finished or gone, with an Update carrying the
// resourceVersion it was read at.
func (l *Lock) takeOver(ctx context.Context, xa *actionsv1alpha1.ExternalAction, lease *coordinationv1.Lease, now time.Time) error {
	prev := ""
	if lease.Spec.HolderIdentity != nil {
		prev = *lease.Spec.HolderIdentity
	}
	log.FromContext(ctx).V(1).Info("taking over the subject from a finished or gone holder", "subject", xa.Spec.Subject, "previous", prev)
	id := holderIdentity(xa)
	lease.Spec.HolderIdentity = &id
	lease.Spec.AcquireTime, lease.Spec.RenewTime = ptrMicro(now), ptrMicro(now)
	lease.Spec.LeaseTransitions = new(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	return l.Client.Update(ctx, lease)
}

// newLease is the Lease that makes xa the holder of its subject. It has no leaseDurationSeconds: the hold
// does not expire by time, it ends by release or when its holder is gone or finished.
func (l *Lock) newLease(xa *actionsv1alpha1.ExternalAction, nn types.NamespacedName) *coordinationv1.Lease {
	id := holderIdentity(xa)
	now := ptrMicro(l.Clock.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: nn.Name, Namespace: nn.Namespace,
			Labels: map[string]string{
				LabelHash:                      subjectHash(xa.Spec.Subject),
				"app.kubernetes.io/managed-by": "actionledger",
			},
			Annotations: map[string]string{Annotation: xa.Spec.Subject},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, AcquireTime: now, RenewTime: now},
	}
}

// holder reads the action named by lease's holderIdentity from the API server (not the cache). free is
// true when no other action can send under it any more: it is gone (or re-created with another UID), being
// deleted without an open claim, or terminal with its outcome recorded and not OutcomeUnknown.
func (l *Lock) holder(ctx context.Context, lease *coordinationv1.Lease) (
	*actionsv1alpha1.ExternalAction, bool, error) {
	if lease.Spec.HolderIdentity == nil {
		return nil, true, nil
	}
	name, uid, ok := strings.Cut(*lease.Spec.HolderIdentity, "/")
	if !ok || name == "" {
		return nil, true, nil
	}
	holder := &actionsv1alpha1.ExternalAction{}
	if err := l.APIReader.Get(ctx, types.NamespacedName{Namespace: lease.Namespace, Name: name}, holder); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("reading the holder %s of subject Lease %s: %w", name, lease.Name, err)
	}
	switch {
	case string(holder.UID) != uid:
		return holder, true, nil
	case holder.Status.Claim != nil:
		return holder, false, nil
	case !holder.DeletionTimestamp.IsZero():
		return holder, true, nil
	case holder.Status.Phase.Terminal() && holder.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown:
		return holder, true, nil
	}
	return holder, false, nil
}

// firstInLine returns the earliest-created (creationTimestamp, then name) unfinished action on xa's subject in
// its namespace that was created before xa, from the cache; nil when there is none.
func (l *Lock) firstInLine(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (*actionsv1alpha1.ExternalAction, error) {
	list := &actionsv1alpha1.ExternalActionList{}
	if err := l.Client.List(ctx, list, client.InNamespace(xa.Namespace), client.MatchingFields{Field: xa.Spec.Subject}); err != nil {
		return nil, fmt.Errorf("listing the actions of subject %q: %w", xa.Spec.Subject, err)
	}
	var first *actionsv1alpha1.ExternalAction
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == xa.UID || o.Status.Phase.Terminal() || !o.DeletionTimestamp.IsZero() || !createdBefore(o, xa) {
			continue
		}
		if first == nil || createdBefore(o, first) {
			first = o
		}
	}
	return first, nil
}

// createdBefore orders actions by creationTimestamp, then name.
func createdBefore(a, b *actionsv1alpha1.ExternalAction) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// Wait says why an action may not take its subject yet. Reason and Message (without Reason: only look again
// after After, nothing to record) are for its status (ledger.WaitForSubject).
type Wait struct {
	Reason, Message string
	After           time.Duration
}

// wait notes that xa waits for other (the Lease holder when holds, else an earlier action), for the wait-time
// metric, and says when to look again without a watch event (recheck).
func (l *Lock) wait(ctx context.Context, xa, other *actionsv1alpha1.ExternalAction, holds bool, now time.Time) *Wait {
	reason, msg := subjectWaitMessage(xa, other, holds)
	l.waits.LoadOrStore(client.ObjectKeyFromObject(xa), now)
	log.FromContext(ctx).V(1).Info("waiting for the subject", "subject", xa.Spec.Subject, "for", klogName(other), "reason", reason)
	return &Wait{Reason: reason, Message: msg, After: recheck}
}

// subjectWaitMessage says whom xa waits for and, behind an OutcomeUnknown holder, which decision to make.
func subjectWaitMessage(xa, other *actionsv1alpha1.ExternalAction, holds bool) (string, string) {
	name := "(unknown)"
	if other != nil {
		name = other.Name
	}
	if other != nil && other.Status.Phase == actionsv1alpha1.PhaseOutcomeUnknown {
		return actionsv1alpha1.ReasonSubjectOutcomeUnknown, fmt.Sprintf(
			"subject %q is held by ExternalAction %s, whose outcome is unknown; nothing is sent until a person decides it: "+
				"annotate %s with %s=applied (it took effect), %s (it did not) or %s, or delete it",
			xa.Spec.Subject, name, name, actionsv1alpha1.AnnotationResolve, actionsv1alpha1.DecisionNotApplied, actionsv1alpha1.DecisionRetry)
	}
	if holds {
		return actionsv1alpha1.ReasonWaitingForSubject, fmt.Sprintf(
			"subject %q is held by ExternalAction %s; nothing is sent until it finishes, is resolved or is deleted",
			xa.Spec.Subject, name)
	}
	return actionsv1alpha1.ReasonWaitingForSubject, fmt.Sprintf(
		"subject %q: ExternalAction %s was created earlier and has not finished; nothing is sent before it",
		xa.Spec.Subject, name)
}

func klogName(xa *actionsv1alpha1.ExternalAction) string {
	if xa == nil {
		return ""
	}
	return xa.Name
}

// taken observes how long xa waited for its subject, if it waited.
func (l *Lock) taken(xa *actionsv1alpha1.ExternalAction, now time.Time) {
	v, ok := l.waits.LoadAndDelete(client.ObjectKeyFromObject(xa))
	if !ok {
		if subjectWaitReason(xa) == "" {
			return
		}
		// Seen waiting by another manager (or before a restart): it has waited since it was created at least
		// as a Pending action never sent; the Reconciling condition's transition is the closest record.
		v = xa.CreationTimestamp.Time
		if c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReconciling); c != nil && xa.Status.Attempts > 0 {
			v = c.LastTransitionTime.Time
		}
	}
	metrics.SubjectWait.Observe(max(now.Sub(v.(time.Time)).Seconds(), 0))
}

// Release deletes xa's subject Lease when xa holds it, with UID and resourceVersion preconditions (a
// Lease changed since it was read is left alone). Called once xa's outcome is terminal and recorded (not
// OutcomeUnknown) and when xa is finalized.
func (l *Lock) Release(ctx context.Context, xa *actionsv1alpha1.ExternalAction) error {
	l.waits.Delete(client.ObjectKeyFromObject(xa))
	if xa.Spec.Subject == "" {
		return nil
	}
	lease := &coordinationv1.Lease{}
	if err := l.APIReader.Get(ctx, types.NamespacedName{Namespace: xa.Namespace, Name: LeaseName(xa.Spec.Subject)}, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading the Lease of subject %q to release it: %w", xa.Spec.Subject, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holderIdentity(xa) {
		return nil
	}
	uid, rv := lease.UID, lease.ResourceVersion
	if err := l.Client.Delete(ctx, lease, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("releasing the Lease of subject %q: %w", xa.Spec.Subject, err)
	}
	log.FromContext(ctx).V(1).Info("released the subject", "subject", xa.Spec.Subject, "phase", xa.Status.Phase)
	return nil
}

// ReleaseAfterWrite releases the subject of an action whose terminal outcome (not OutcomeUnknown) was just
// written. A failure is logged: reconcileTerminal and finalize release again, and a waiter takes a finished
// holder's Lease over anyway.
func (l *Lock) ReleaseAfterWrite(xa *actionsv1alpha1.ExternalAction) {
	if xa.Spec.Subject == "" || !Releasable(xa) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := l.Release(ctx, xa); err != nil {
		log.Log.WithName("subject").Info("releasing the subject failed; it is released later", "externalaction",
			client.ObjectKeyFromObject(xa), "error", err.Error())
	}
}

// Releasable: the outcome is terminal and recorded, and not OutcomeUnknown (which keeps holding the subject).
func Releasable(xa *actionsv1alpha1.ExternalAction) bool {
	return xa.Status.Phase.Terminal() && xa.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown && xa.Status.Claim == nil
}

// ActionsOnSameSubject maps an ExternalAction to the other unfinished actions on its subject in its namespace
// (from the cache, Field), so that a waiter looks again when the holder finishes, is resolved or is gone.
func (l *Lock) ActionsOnSameSubject(ctx context.Context, o client.Object) []reconcile.Request {
	xa, ok := o.(*actionsv1alpha1.ExternalAction)
	if !ok || xa.Spec.Subject == "" {
		return nil
	}
	list := &actionsv1alpha1.ExternalActionList{}
	if err := l.Client.List(ctx, list, client.InNamespace(xa.Namespace), client.MatchingFields{Field: xa.Spec.Subject},
		client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).V(1).Info("listing the actions of a subject failed", "subject", xa.Spec.Subject, "err", err.Error())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		other := &list.Items[i]
		if other.UID != xa.UID && !other.Status.Phase.Terminal() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(other)})
		}
	}
	return out
}

// Changed passes the changes of an action with a subject that can end a wait on it: a phase change into
// or out of a terminal phase (finished, resolved, or sent again after a retry decision), or its deletion.
var Changed = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	DeleteFunc: func(e event.DeleteEvent) bool {
		xa, ok := e.Object.(*actionsv1alpha1.ExternalAction)
		return ok && xa.Spec.Subject != ""
	},
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*actionsv1alpha1.ExternalAction)
		n, ok2 := e.ObjectNew.(*actionsv1alpha1.ExternalAction)
		if !ok1 || !ok2 || n.Spec.Subject == "" {
			return false
		}
		return (o.Status.Phase != n.Status.Phase && (o.Status.Phase.Terminal() || n.Status.Phase.Terminal())) ||
			o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
	},
}

// UpdateGauges sets actionledger_subject_waiting and actionledger_subject_blocked_by_unknown_seconds from
// the cache (WaitField).
func UpdateGauges(ctx context.Context, c client.Reader, now time.Time) error {
	waiting := 0
	for _, reason := range []string{actionsv1alpha1.ReasonWaitingForSubject, actionsv1alpha1.ReasonSubjectOutcomeUnknown} {
		list := &actionsv1alpha1.ExternalActionList{}
		if err := c.List(ctx, list, client.MatchingFields{WaitField: reason}, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("listing actions waiting for a subject: %w", err)
		}
		waiting += len(list.Items)
		if reason != actionsv1alpha1.ReasonSubjectOutcomeUnknown {
			continue
		}
		longest := 0.0
		for i := range list.Items {
			if s := meta.FindStatusCondition(list.Items[i].Status.Conditions, actionsv1alpha1.ConditionStalled); s != nil &&
				s.Status == metav1.ConditionTrue && s.Reason == reason {
				longest = max(longest, now.Sub(s.LastTransitionTime.Time).Seconds())
			}
		}
		metrics.SubjectBlockedByUnknown.Set(longest)
	}
	metrics.SubjectWaiting.Set(float64(waiting))
	return nil
}

func ptrMicro(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}
