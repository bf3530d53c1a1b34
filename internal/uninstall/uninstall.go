// Package uninstall prepares the removal of actionledger from a cluster (`actionledger uninstall`, the Helm chart's
// pre-delete hook; docs/uninstall.md). Once the manager is gone nothing removes the ledger finalizer of an
// ExternalAction, so a namespace holding actions would stay Terminating forever. Before the manager goes, this
// package stops it (its graceful shutdown waits for and records the sends it has open), then, for every action
// that still holds the finalizer, does what the manager's finalizer does at a deletion (DESIGN rules 7 and 8):
// an action without an open attempt gets its tombstone written, then loses the finalizer; an action with an open
// attempt (a claim without an outcome) or a dead-letter record still owed keeps it and is reported, with what to do.
package uninstall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/deadletter"
	"github.com/actionledger/actionledger/internal/destination"
	"github.com/actionledger/actionledger/internal/tombstone"
	"github.com/actionledger/actionledger/internal/tombstone/objects"
)

// Options configure Run.
type Options struct {
	// Client reads and writes the API server directly (no cache).
	Client client.Client
	// Manager is the manager's Deployment, scaled to 0 first; empty Name: no manager to stop (it is not running).
	Manager types.NamespacedName
	// Namespace limits the actions to one namespace (the chart's rbac.namespaced); empty: every namespace.
	Namespace string
	// StopTimeout bounds the wait for the manager's pods to go (its graceful shutdown records open sends).
	StopTimeout time.Duration
	// Poll is the interval of that wait (default 1 s).
	Poll time.Duration
	// Now is the clock of the tombstones' expiry (default time.Now).
	Now func() time.Time
	// Out receives the report, one line per held action.
	Out io.Writer
}

// Held is an action that keeps its finalizer.
type Held struct {
	Namespace, Name string
	Why             string
}

// Report is what Run did.
type Report struct {
	// Released counts the actions whose finalizer was removed; Tombstones the tombstones written for them.
	Released, Tombstones int
	// Held are the actions that keep their finalizer.
	Held []Held
	// ManagerReplicas is the manager's replica count before Run scaled it to 0 (Restore sets it back).
	ManagerReplicas int32
}

// ErrHeld is returned (wrapped) by Run when an action keeps its finalizer.
var ErrHeld = errors.New("actions with an open attempt keep their finalizer")

// Run stops the manager, then releases the finalizer of every action that has no open attempt, each after its
// tombstone, and reports the others. It returns an error wrapping ErrHeld when an action is held.
func Run(ctx context.Context, o Options) (Report, error) {
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	var rep Report
	replicas, err := stopManager(ctx, o)
	rep.ManagerReplicas = replicas
	if err != nil {
		return rep, err
	}
	store := &objects.Store{Client: o.Client, Reader: o.Client}
	list := &actionsv1alpha1.ExternalActionList{}
	cont := ""
	for {
		opts := []client.ListOption{client.Limit(500), client.Continue(cont)}
		if o.Namespace != "" {
			opts = append(opts, client.InNamespace(o.Namespace))
		}
		if err := o.Client.List(ctx, list, opts...); err != nil {
			return rep, fmt.Errorf("listing ExternalActions: %w", err)
		}
		for i := range list.Items {
			if err := release(ctx, o, store, &list.Items[i], &rep); err != nil {
				return rep, err
			}
		}
		if cont = list.Continue; cont == "" {
			break
		}
	}
	_, _ = fmt.Fprintf(o.Out, "actionledger uninstall: %d action(s) released (%d tombstone(s) written), %d held\n",
		rep.Released, rep.Tombstones, len(rep.Held))
	if len(rep.Held) == 0 {
		return rep, nil
	}
	for _, h := range rep.Held {
		_, _ = fmt.Fprintf(o.Out, "  held: ExternalAction %s/%s: %s\n", h.Namespace, h.Name, h.Why)
	}
	_, _ = fmt.Fprint(o.Out, heldAdvice)
	return rep, fmt.Errorf("%d action(s): %w", len(rep.Held), ErrHeld)
}

// heldAdvice says how to finish the held actions.
const heldAdvice = `Only the manager can record or settle these (an outcome not yet recorded is settled by the rules of
docs/concepts.md: resent only when repeating is safe, else OutcomeUnknown). The manager has been started again.
Let it finish them (kubectl get xa -A; an open attempt ends within its destination's timeout), then run the
uninstall again. Or uninstall anyway with 'helm uninstall --no-hooks': these actions then keep their finalizer,
and a namespace holding one stays Terminating until actionledger is installed again (docs/uninstall.md).
`

// stopManager scales the manager's Deployment to 0 and waits until it has no pod left; it returns the replica
// count it had.
func stopManager(ctx context.Context, o Options) (int32, error) {
	if o.Manager.Name == "" {
		return 0, nil
	}
	d := &appsv1.Deployment{}
	if err := o.Client.Get(ctx, o.Manager, d); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, fmt.Errorf("reading the manager Deployment %s: %w", o.Manager, err)
	}
	var replicas int32 = 1
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if replicas != 0 {
		if err := scale(ctx, o.Client, d, 0); err != nil {
			return replicas, err
		}
		_, _ = fmt.Fprintf(o.Out, "actionledger uninstall: stopping the manager (Deployment %s, %d replica(s)): open sends are awaited and recorded\n",
			o.Manager, replicas)
	}
	deadline := time.Now().Add(o.StopTimeout)
	for {
		pods := &corev1.PodList{}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return replicas, fmt.Errorf("the manager Deployment's selector: %w", err)
		}
		if err := o.Client.List(ctx, pods, client.InNamespace(o.Manager.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return replicas, fmt.Errorf("listing the manager's pods: %w", err)
		}
		left := 0
		for i := range pods.Items {
			if ownedBy(&pods.Items[i], d.Name) {
				left++
			}
		}
		if left == 0 {
			return replicas, nil
		}
		if time.Now().After(deadline) {
			return replicas, fmt.Errorf("the manager's %d pod(s) did not stop within %s", left, o.StopTimeout)
		}
		select {
		case <-ctx.Done():
			return replicas, ctx.Err()
		case <-time.After(o.Poll):
		}
	}
}

// ownedBy reports whether pod belongs to the Deployment named deployment: its ReplicaSet is "<deployment>-<its
// pod-template-hash>". Another Deployment whose selector the pod matches as well (a second manager copied from the
// chart's, with one more label) is not this one.
func ownedBy(pod *corev1.Pod, deployment string) bool {
	for _, ref := range pod.OwnerReferences {
		if ref.Kind == "ReplicaSet" && ref.Name == deployment+"-"+pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey] {
			return true
		}
	}
	return false
}

func scale(ctx context.Context, c client.Client, d *appsv1.Deployment, n int32) error {
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = &n
	if err := c.Patch(ctx, d, patch); err != nil {
		return fmt.Errorf("scaling the manager Deployment %s/%s to %d: %w", d.Namespace, d.Name, n, err)
	}
	return nil
}

// Restore scales the manager back to replicas (after Run held actions, so that it finishes them).
func Restore(ctx context.Context, o Options, replicas int32) error {
	if o.Manager.Name == "" || replicas == 0 {
		return nil
	}
	d := &appsv1.Deployment{}
	if err := o.Client.Get(ctx, o.Manager, d); err != nil {
		return fmt.Errorf("reading the manager Deployment %s: %w", o.Manager, err)
	}
	return scale(ctx, o.Client, d, replicas)
}

// release handles one action: held, or tombstone then finalizer. A conflict reads the action again and decides
// again (its status may have changed).
func release(ctx context.Context, o Options, store tombstone.Store, xa *actionsv1alpha1.ExternalAction, rep *Report) error {
	for range 5 {
		if !controllerutil.ContainsFinalizer(xa, actionsv1alpha1.Finalizer) {
			return nil
		}
		if why := heldBy(xa); why != "" {
			rep.Held = append(rep.Held, Held{Namespace: xa.Namespace, Name: xa.Name, Why: why})
			return nil
		}
		written, err := writeTombstone(ctx, o, store, xa)
		if err != nil {
			return err
		}
		if written {
			rep.Tombstones++
		}
		patch := client.MergeFromWithOptions(xa.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(xa, actionsv1alpha1.Finalizer)
		err = o.Client.Patch(ctx, xa, patch)
		switch {
		case err == nil:
			rep.Released++
			return nil
		case apierrors.IsNotFound(err):
			return nil
		case !apierrors.IsConflict(err):
			return fmt.Errorf("removing the finalizer of %s/%s: %w", xa.Namespace, xa.Name, err)
		}
		if err := o.Client.Get(ctx, client.ObjectKeyFromObject(xa), xa); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	return fmt.Errorf("removing the finalizer of %s/%s: it kept changing", xa.Namespace, xa.Name)
}

// heldBy says why xa keeps its finalizer, or "": an attempt claimed without a recorded outcome (DESIGN rule 8: its
// deletion waits for the outcome, which only the manager records or settles), or a dead-letter record still owed.
func heldBy(xa *actionsv1alpha1.ExternalAction) string {
	if c := xa.Status.Claim; c != nil {
		return fmt.Sprintf("attempt %d is open (claimed by %s at %s), its outcome not recorded", c.Attempt, c.Holder,
			c.StartedAt.UTC().Format(time.RFC3339))
	}
	if deadletter.Owed(&xa.Status) {
		return fmt.Sprintf("a dead-letter record is owed to %s (%s)", xa.Status.DeadLetter.Sink, xa.Status.DeadLetter.State)
	}
	return ""
}

// writeTombstone writes xa's tombstone as the manager's finalizer does (internal/controller, writeTombstone): the key,
// fingerprint, phase and recorded response, kept for the destination's retention.tombstoneTTL (default 30 days).
// An action under which nothing was bound or sent gets none. A namespace being deleted refuses the create; its
// tombstones go with it, so the action goes without one, as at the manager's finalizer.
func writeTombstone(ctx context.Context, o Options, store tombstone.Store, xa *actionsv1alpha1.ExternalAction) (bool, error) {
	st := &xa.Status
	if st.Fingerprint == "" || st.Phase == actionsv1alpha1.PhaseConflict || (st.Attempts == 0 && st.ReplayedFrom == nil) {
		return false, nil
	}
	ttl, err := tombstoneTTL(ctx, o.Client, xa)
	if err != nil {
		return false, err
	}
	rec := &tombstone.Record{Namespace: xa.Namespace, Name: xa.Name, Spec: actionsv1alpha1.ActionTombstoneSpec{
		Key: st.IdempotencyKey, Fingerprint: st.Fingerprint, Phase: st.Phase,
		CompletedAt: st.CompletedAt, UID: string(xa.UID), ExpiresAt: metav1.NewTime(o.Now().Add(ttl)),
	}}
	if st.ReplayedFrom != nil && st.ReplayedFrom.UID != "" {
		rec.Spec.UID = st.ReplayedFrom.UID
		if st.ReplayedFrom.CompletedAt != nil {
			rec.Spec.CompletedAt = st.ReplayedFrom.CompletedAt
		}
	}
	if st.Response != nil {
		rec.Spec.StatusCode, rec.Spec.Response = st.Response.StatusCode, st.Response.DeepCopy()
	}
	if err := store.Write(ctx, rec, xa.UID); err != nil {
		var s *apierrors.StatusError
		if errors.As(err, &s) && apierrors.HasStatusCause(s, corev1.NamespaceTerminatingCause) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// tombstoneTTL is the retention.tombstoneTTL of xa's destination, or the default when it has none, is gone or may not
// be read.
func tombstoneTTL(ctx context.Context, c client.Client, xa *actionsv1alpha1.ExternalAction) (time.Duration, error) {
	var ret *actionsv1alpha1.Retention
	ref := xa.Spec.DestinationRef
	var err error
	if ref.Kind == "ClusterDestination" {
		d := &actionsv1alpha1.ClusterDestination{}
		if err = c.Get(ctx, types.NamespacedName{Name: ref.Name}, d); err == nil {
			ret = d.Spec.Retention
		}
	} else {
		d := &actionsv1alpha1.Destination{}
		if err = c.Get(ctx, types.NamespacedName{Namespace: xa.Namespace, Name: ref.Name}, d); err == nil {
			ret = d.Spec.Retention
		}
	}
	// Forbidden: the chart's namespaced RBAC (rbac.namespaced) gives the hook no ClusterDestinations.
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return 0, fmt.Errorf("reading the destination of %s/%s for its tombstone TTL: %w", xa.Namespace, xa.Name, err)
	}
	if ret != nil && ret.TombstoneTTL != nil {
		return ret.TombstoneTTL.Duration, nil
	}
	return destination.DefaultTombstoneTTL, nil
}
