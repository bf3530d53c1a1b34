package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/metrics"
)

// How spec.subject works (docs/concepts.md, "One action at a time per subject"):
//
//   - The hold is a coordination.k8s.io/v1 Lease per namespace and subject, named SubjectLeaseName(subject), whose
//     holderIdentity is "<name>/<uid>" of the holding action. It is taken before every claim (holdSubject) with
//     an optimistic-concurrency write: a Create when there is none, else an Update carrying the resourceVersion it
//     was read at (a take-over from a holder that is gone or finished, or a touch of our own hold). Two actions, on
//     any number of managers with any cache lag, cannot both win: the API server serializes writes to one object.
//     The claim (DESIGN rule 1) is written only after the hold is ours, so an attempt is only ever in flight under
//     the hold.
//   - The hold ends when the holder's outcome is terminal and recorded, except OutcomeUnknown (releaseSubject,
//     from afterWrite and reconcileTerminal), and when the holder is finalized (finalize). The release is a Delete
//     with UID and resourceVersion preconditions. A missed release costs nothing: the next action takes the Lease
//     over once a fresh read shows its holder gone, or terminal (not OutcomeUnknown) without an open claim.
//   - Creation order is best effort: before it takes the Lease, an action waits for any earlier-created
//     (creationTimestamp, then name) unfinished action on the subject that the cache shows. The Lease, not the
//     cache, keeps two from being in flight at once.

const (
	// SubjectField indexes ExternalActions in the cache by spec.subject (actions without one are not indexed).
	SubjectField = "spec.subject"
	// SubjectWaitField indexes waiting ExternalActions by their wait reason (WaitingForSubject or
	// SubjectOutcomeUnknown), so that the gauges read only them.
	SubjectWaitField = "status.subjectWait"

	// SubjectLeasePrefix starts the name of every subject Lease.
	SubjectLeasePrefix = "xa-subject-"
	// LabelSubjectHash labels a subject Lease with the 20 hex digits of its name (a label value cannot hold the
	// subject itself, which may contain "/").
	LabelSubjectHash = "actions.actionledger.dev/subject-hash"
	// AnnotationSubject carries the subject on its Lease, in full.
	AnnotationSubject = "actions.actionledger.dev/subject"

	// subjectRecheck is how often a waiting action looks again without a watch event (a safety net).
	subjectRecheck = 30 * time.Second
	// subjectTakeTries bounds the optimistic-concurrency writes of one holdSubject call.
	subjectTakeTries = 4
	// releaseTimeout bounds a release made outside a reconcile's own context.
	releaseTimeout = 5 * time.Second
)

// SubjectLeaseName is the Lease that holds subject in its namespace: "xa-subject-" and the first 20 hex digits
// (80 bits) of the SHA-256 of the subject.
func SubjectLeaseName(subject string) string {
	return SubjectLeasePrefix + subjectHash(subject)
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

// IndexSubject registers SubjectField and SubjectWaitField with the manager's cache.
func IndexSubject(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &actionsv1alpha1.ExternalAction{}, SubjectField, func(o client.Object) []string {
		if xa, ok := o.(*actionsv1alpha1.ExternalAction); ok && xa.Spec.Subject != "" {
			return []string{xa.Spec.Subject}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing ExternalActions by %s: %w", SubjectField, err)
	}
	if err := idx.IndexField(ctx, &actionsv1alpha1.ExternalAction{}, SubjectWaitField, func(o client.Object) []string {
		if xa, ok := o.(*actionsv1alpha1.ExternalAction); ok {
			if r := subjectWaitReason(xa); r != "" {
				return []string{r}
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing ExternalActions by %s: %w", SubjectWaitField, err)
	}
	return nil
}

// holdSubject makes sure xa holds its subject before a claim. held true: the Lease names xa, written by this
// call with optimistic concurrency. held false: xa waits (its status says for whom; res says when to look again).
func (r *ExternalActionReconciler) holdSubject(ctx context.Context, xa *actionsv1alpha1.ExternalAction, env ledger.Env) (
	held bool, res ctrl.Result, err error) {
	nn := types.NamespacedName{Namespace: xa.Namespace, Name: SubjectLeaseName(xa.Spec.Subject)}
	for range subjectTakeTries {
		lease := &coordinationv1.Lease{}
		if err := r.APIReader.Get(ctx, nn, lease); err != nil {
			if !apierrors.IsNotFound(err) {
				return false, ctrl.Result{}, fmt.Errorf("reading the Lease of subject %q: %w", xa.Spec.Subject, err)
			}
			lease = nil
		}
		ours := lease != nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == holderIdentity(xa)
		if !ours {
			// Creation order (best effort, from the cache): an earlier unfinished action goes first. Not asked
			// when xa holds the Lease already, so that the holder never waits for an action that waits for it.
			if first, err := r.firstInLine(ctx, xa); err != nil || first != nil {
				if err != nil {
					return false, ctrl.Result{}, err
				}
				res, err := r.waitSubject(ctx, xa, first, false, env)
				return false, res, err
			}
		}
		var werr error
		switch {
		case lease == nil:
			werr = r.Create(ctx, r.newSubjectLease(xa, nn))
		case ours:
			// A touch with the resourceVersion read: a take-over decided on an older version loses (and one
			// decided on this version wins, and this claim waits).
			lease.Spec.RenewTime = ptrMicro(env.Now)
			werr = r.Update(ctx, lease)
		default:
			holder, free, err := r.subjectHolder(ctx, lease)
			if err != nil {
				return false, ctrl.Result{}, err
			}
			if !free {
				res, err := r.waitSubject(ctx, xa, holder, true, env)
				return false, res, err
			}
			prev := ""
			if lease.Spec.HolderIdentity != nil {
				prev = *lease.Spec.HolderIdentity
			}
			log.FromContext(ctx).V(1).Info("taking over the subject from a finished or gone holder", "subject", xa.Spec.Subject, "previous", prev)
			id := holderIdentity(xa)
			lease.Spec.HolderIdentity = &id
			lease.Spec.AcquireTime, lease.Spec.RenewTime = ptrMicro(env.Now), ptrMicro(env.Now)
			lease.Spec.LeaseTransitions = new(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
			werr = r.Update(ctx, lease)
		}
		switch {
		case werr == nil:
			r.subjectTaken(xa, env.Now)
			return true, ctrl.Result{}, nil
		case apierrors.IsAlreadyExists(werr), apierrors.IsConflict(werr), apierrors.IsNotFound(werr):
			continue // another writer moved first: read again and decide again
		default:
			return false, ctrl.Result{}, fmt.Errorf("taking the Lease of subject %q: %w", xa.Spec.Subject, werr)
		}
	}
	return false, ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
}

// newSubjectLease is the Lease that makes xa the holder of its subject. It has no leaseDurationSeconds: the hold
// does not expire by time, it ends by release or when its holder is gone or finished.
func (r *ExternalActionReconciler) newSubjectLease(xa *actionsv1alpha1.ExternalAction, nn types.NamespacedName) *coordinationv1.Lease {
	id := holderIdentity(xa)
	now := ptrMicro(r.Clock.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: nn.Name, Namespace: nn.Namespace,
			Labels: map[string]string{
				LabelSubjectHash:               subjectHash(xa.Spec.Subject),
				"app.kubernetes.io/managed-by": "actionledger",
			},
			Annotations: map[string]string{AnnotationSubject: xa.Spec.Subject},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, AcquireTime: now, RenewTime: now},
	}
}

// subjectHolder reads the action named by lease's holderIdentity from the API server (not the cache). free is
// true when no other action can send under it any more: it is gone (or re-created with another UID), being
// deleted without an open claim, or terminal with its outcome recorded and not OutcomeUnknown.
func (r *ExternalActionReconciler) subjectHolder(ctx context.Context, lease *coordinationv1.Lease) (
	*actionsv1alpha1.ExternalAction, bool, error) {
	if lease.Spec.HolderIdentity == nil {
		return nil, true, nil
	}
	name, uid, ok := strings.Cut(*lease.Spec.HolderIdentity, "/")
	if !ok || name == "" {
		return nil, true, nil
	}
	holder := &actionsv1alpha1.ExternalAction{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: lease.Namespace, Name: name}, holder); err != nil {
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
func (r *ExternalActionReconciler) firstInLine(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (*actionsv1alpha1.ExternalAction, error) {
	list := &actionsv1alpha1.ExternalActionList{}
	if err := r.List(ctx, list, client.InNamespace(xa.Namespace), client.MatchingFields{SubjectField: xa.Spec.Subject}); err != nil {
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

// waitSubject records that xa waits for other (the Lease holder when holds, else an earlier action), and looks
// again on a watch event or after subjectRecheck. Nothing is claimed or sent.
func (r *ExternalActionReconciler) waitSubject(ctx context.Context, xa, other *actionsv1alpha1.ExternalAction, holds bool,
	env ledger.Env) (ctrl.Result, error) {
	reason, msg := subjectWaitMessage(xa, other, holds)
	r.subjectWaits.LoadOrStore(client.ObjectKeyFromObject(xa), env.Now)
	log.FromContext(ctx).V(1).Info("waiting for the subject", "subject", xa.Spec.Subject, "for", klogName(other), "reason", reason)
	if _, err := r.apply(ctx, xa, ledger.WaitForSubject(&xa.Status, reason, msg, env), ""); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: subjectRecheck}, nil
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

// subjectTaken observes how long xa waited for its subject, if it waited.
func (r *ExternalActionReconciler) subjectTaken(xa *actionsv1alpha1.ExternalAction, now time.Time) {
	v, ok := r.subjectWaits.LoadAndDelete(client.ObjectKeyFromObject(xa))
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

// releaseSubject deletes xa's subject Lease when xa holds it, with UID and resourceVersion preconditions (a
// Lease changed since it was read is left alone). Called once xa's outcome is terminal and recorded (not
// OutcomeUnknown) and when xa is finalized.
func (r *ExternalActionReconciler) releaseSubject(ctx context.Context, xa *actionsv1alpha1.ExternalAction) error {
	r.subjectWaits.Delete(client.ObjectKeyFromObject(xa))
	if xa.Spec.Subject == "" || r.APIReader == nil {
		return nil
	}
	lease := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: xa.Namespace, Name: SubjectLeaseName(xa.Spec.Subject)}, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading the Lease of subject %q to release it: %w", xa.Spec.Subject, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holderIdentity(xa) {
		return nil
	}
	uid, rv := lease.UID, lease.ResourceVersion
	if err := r.Delete(ctx, lease, client.Preconditions{UID: &uid, ResourceVersion: &rv}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("releasing the Lease of subject %q: %w", xa.Spec.Subject, err)
	}
	log.FromContext(ctx).V(1).Info("released the subject", "subject", xa.Spec.Subject, "phase", xa.Status.Phase)
	return nil
}

// releaseAfterWrite releases the subject of an action whose terminal outcome (not OutcomeUnknown) was just
// written. A failure is logged: reconcileTerminal and finalize release again, and a waiter takes a finished
// holder's Lease over anyway.
func (r *ExternalActionReconciler) releaseAfterWrite(xa *actionsv1alpha1.ExternalAction) {
	if xa.Spec.Subject == "" || !releasable(xa) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := r.releaseSubject(ctx, xa); err != nil {
		log.Log.WithName("subject").Info("releasing the subject failed; it is released later", "externalaction",
			client.ObjectKeyFromObject(xa), "error", err.Error())
	}
}

// releasable: the outcome is terminal and recorded, and not OutcomeUnknown (which keeps holding the subject).
func releasable(xa *actionsv1alpha1.ExternalAction) bool {
	return xa.Status.Phase.Terminal() && xa.Status.Phase != actionsv1alpha1.PhaseOutcomeUnknown && xa.Status.Claim == nil
}

// actionsOnSameSubject maps an ExternalAction to the other unfinished actions on its subject in its namespace
// (from the cache, SubjectField), so that a waiter looks again when the holder finishes, is resolved or is gone.
func (r *ExternalActionReconciler) actionsOnSameSubject(ctx context.Context, o client.Object) []reconcile.Request {
	xa, ok := o.(*actionsv1alpha1.ExternalAction)
	if !ok || xa.Spec.Subject == "" {
		return nil
	}
	list := &actionsv1alpha1.ExternalActionList{}
	if err := r.List(ctx, list, client.InNamespace(xa.Namespace), client.MatchingFields{SubjectField: xa.Spec.Subject},
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

// subjectChanged passes the changes of an action with a subject that can end a wait on it: a phase change into
// or out of a terminal phase (finished, resolved, or sent again after a retry decision), or its deletion.
var subjectChanged = predicate.Funcs{
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

// updateSubjectGauges sets actionledger_subject_waiting and actionledger_subject_blocked_by_unknown_seconds from
// the cache (SubjectWaitField).
func updateSubjectGauges(ctx context.Context, c client.Reader, now time.Time) error {
	waiting := 0
	for _, reason := range []string{actionsv1alpha1.ReasonWaitingForSubject, actionsv1alpha1.ReasonSubjectOutcomeUnknown} {
		list := &actionsv1alpha1.ExternalActionList{}
		if err := c.List(ctx, list, client.MatchingFields{SubjectWaitField: reason}, client.UnsafeDisableDeepCopy); err != nil {
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
