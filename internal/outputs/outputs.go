// Package outputs implements spec.outputs: values taken from the successful response of an action, held in
// memory only, and written to a Secret or ConfigMap of the action's namespace after the outcome is recorded.
package outputs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/redact"
	"github.com/actionledger/actionledger/internal/requeue"
	"github.com/actionledger/actionledger/internal/status"
)

// How spec.outputs flows. The values are taken from the response of the attempt that succeeded, in the send
// itself (Hold: the whole body up to MaxOutputResponseBytes, the destination's Secret values redacted),
// and held in m.outputs, in memory only: they may be secret, so they are never put in status, events or logs.
// The outcome is recorded first (DESIGN rule 2; ledger.Record leaves Ready False with OutputsReady reason
// OutputsPending), then Settle creates the target and records OutputsReady (ledger.SettleOutputs). A
// process that stops between the two loses the values: the next manager finds OutputsPending with nothing in
// memory and records OutputLost, unless the target this action created is already there. Nothing is ever sent
// again to re-derive them.

// heldOutputs are the output values of one action, taken from its successful response, until the target is
// written.
type heldOutputs struct {
	uid    types.UID
	values map[string]string
	// err is the first expression that failed (key and CEL error, never a value); values is then nil.
	err error
	// view, when set, is the response whose values are not taken yet: an expression's evaluation did not finish
	// (expr.Unfinished), which decides nothing (DESIGN rule 12); Settle evaluates them again on it. unfinished
	// counts those evaluations.
	view       *redact.View
	unfinished int32
}

// Manager holds the values of spec.outputs between the send that took them and the write of the target, and
// settles status.outputs with the status writer. Its zero value is not usable: set every field but held.
type Manager struct {
	// Client creates output objects and reads their metadata from the label-filtered cache.
	Client client.Client
	// APIReader reads output objects and actions live from the API server.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Exprs     *expr.Cache
	Clock     clock.PassiveClock
	Writer    *status.Writer
	// Env builds the decision environment of an action without its destination (retention, generation).
	Env func(xa *actionsv1alpha1.ExternalAction) ledger.Env
	// Sharded: another shard may hold an action's values (--watch-label-selector), so OutputLost waits LostGrace.
	Sharded bool
	// Wake enqueues an action whose evaluation slot came (expr.HoldSlot); nil: only the requeue looks again.
	Wake func(types.NamespacedName)

	// held holds the values taken from a successful response until the target is written; kept nowhere else.
	held sync.Map // types.NamespacedName -> *heldOutputs
}

// Forget drops the values held for nn (the object is gone, or its outputs are settled elsewhere).
func (mgr *Manager) Forget(nn types.NamespacedName) { mgr.held.Delete(nn) }

// Holds reports whether values are held for nn and whether they were taken for the object with uid.
func (mgr *Manager) Holds(nn types.NamespacedName, uid types.UID) (holds, same bool) {
	v, ok := mgr.held.Load(nn)
	return ok, ok && v.(*heldOutputs).uid == uid
}

// Kinds of output objects, as status.outputs.kind names them.
const (
	kindSecret    = "Secret"
	kindConfigMap = "ConfigMap"
)

// outputMeta is a metadata-only copy of a Secret or ConfigMap (the manager caches only the metadata of output
// objects, CacheOptions).
func outputMeta(kind string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind}}
}

// CacheOptions are the manager's cache options for output objects: Secrets and ConfigMaps are cached as
// metadata only, and only those labelled actions.actionledger.dev/output, so that the manager never holds every
// Secret of the cluster. Use them in cache.Options.ByObject.
func CacheOptions() map[client.Object]cache.ByObject {
	req, err := labels.NewRequirement(actionsv1alpha1.LabelOutput, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	sel := labels.NewSelector().Add(*req)
	return map[client.Object]cache.ByObject{
		outputMeta(kindSecret):    {Label: sel},
		outputMeta(kindConfigMap): {Label: sel},
	}
}

// outputTarget is the kind and name of xa's output object.
func outputTarget(xa *actionsv1alpha1.ExternalAction) (string, string) {
	if o := xa.Spec.Outputs; o != nil && o.ConfigMapName != "" {
		return kindConfigMap, o.ConfigMapName
	}
	return kindSecret, xa.Spec.Outputs.SecretName
}

// Check compiles every expression of spec.outputs.values (an error is an InvalidSpec: nothing is sent).
func (mgr *Manager) Check(xa *actionsv1alpha1.ExternalAction) error {
	if xa.Spec.Outputs == nil {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(xa.Spec.Outputs.Values)) {
		if _, err := mgr.Exprs.GetValue(string(xa.Spec.Outputs.Values[k])); err != nil {
			return fmt.Errorf("spec.outputs.values[%q]: %w", k, err)
		}
	}
	return nil
}

// outputEvalBudget bounds the evaluation of all the expressions of one action's outputs.
const outputEvalBudget = 2 * time.Second

// MaxHeldBytes caps the values of one action's outputs together, in bytes, before they are held: the size
// limit of a Secret or ConfigMap (1 MiB), which the API server would refuse anyway after the send.
const MaxHeldBytes = 1 << 20

// Hold evaluates spec.outputs.values on view, the redacted view of the successful response, and holds the
// result in memory until Settle writes it. The expressions see the body as kept (up to
// MaxOutputResponseBytes) and the headers, with the destination's Secret values replaced by Redacted in every
// form the view knows (DESIGN rule 11: a value read from a Secret goes into the request and nowhere else, so
// it never reaches an output either). A failure is held as the key, the expression's kind of failure and
// never a value (expr.EvalError).
//
// An evaluation that did not finish (its deadline, no evaluation slot in time: expr.Unfinished) is not a failure
// (DESIGN rule 12): the view itself is held, and Settle evaluates the values again on it.
func (mgr *Manager) Hold(ctx context.Context, xa *actionsv1alpha1.ExternalAction, view *redact.View) {
	h := mgr.take(ctx, xa, view)
	mgr.held.Store(types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name}, h)
}

// take evaluates spec.outputs.values on view (Hold).
func (mgr *Manager) take(ctx context.Context, xa *actionsv1alpha1.ExternalAction, view *redact.View) *heldOutputs {
	h := &heldOutputs{uid: xa.UID}
	in := expr.Response{StatusCode: view.StatusCode, Header: view.Header, Body: view.Body}
	ctx, cancel := context.WithTimeout(expr.WithFlow(ctx, xa.Namespace), outputEvalBudget)
	defer cancel()
	values := make(map[string]string, len(xa.Spec.Outputs.Values))
	held := 0
	for _, k := range slices.Sorted(maps.Keys(xa.Spec.Outputs.Values)) {
		p, err := mgr.Exprs.GetValue(string(xa.Spec.Outputs.Values[k]))
		var v string
		if err == nil {
			v, err = p.EvalString(ctx, in)
		}
		if held += len(k) + len(v); err == nil && held > MaxHeldBytes {
			err = fmt.Errorf("the values come to more than %d bytes, the size limit of a %s", MaxHeldBytes, kindOf(xa))
		}
		if err == nil {
			values[k] = v
		}
		if expr.Unfinished(err) {
			h.view = view
			h.err = fmt.Errorf("spec.outputs.values[%q]: %w", k, err)
			return h
		}
		if err != nil {
			if _, eval := errors.AsType[*expr.EvalError](err); eval {
				err = fmt.Errorf("%w%s", err, view.NotExposed())
			}
			if view.BodyTruncated {
				err = fmt.Errorf("%w (the response body is longer than %d bytes; the expressions see only its beginning)",
					err, actionsv1alpha1.MaxOutputResponseBytes)
			}
			h.err = fmt.Errorf("spec.outputs.values[%q]: %w", k, err)
			return h
		}
	}
	h.values = values
	return h
}

// retake evaluates again the values of h, held as a view whose evaluation did not finish, and holds the result;
// it returns the wait before the next try when this one did not finish either (ledger.JudgeBackoff).
func (mgr *Manager) retake(ctx context.Context, xa *actionsv1alpha1.ExternalAction, h *heldOutputs) (*heldOutputs, time.Duration) {
	again := mgr.take(ctx, xa, h.view)
	if again.view != nil {
		again.unfinished = h.unfinished + 1
	}
	mgr.held.Store(client.ObjectKeyFromObject(xa), again)
	if again.view != nil {
		return again, ledger.JudgeBackoff(again.unfinished)
	}
	return again, 0
}

// kindOf is the kind of xa's output object.
func kindOf(xa *actionsv1alpha1.ExternalAction) string {
	kind, _ := outputTarget(xa)
	return kind
}

// heldFor returns the outputs held for xa (the same UID), or nil.
func (mgr *Manager) heldFor(xa *actionsv1alpha1.ExternalAction) *heldOutputs {
	v, ok := mgr.held.Load(types.NamespacedName{Namespace: xa.Namespace, Name: xa.Name})
	if !ok || v.(*heldOutputs).uid != xa.UID {
		return nil
	}
	return v.(*heldOutputs)
}

// ownedOutput reports whether obj was written for one of uids: its AnnotationOutputOfUID, or its controller
// ownerReference, names one of them.
func ownedOutput(obj metav1.Object, uids ...types.UID) bool {
	a := obj.GetAnnotations()[actionsv1alpha1.AnnotationOutputOfUID]
	ref := metav1.GetControllerOfNoCopy(obj)
	for _, u := range uids {
		if u != "" && (a == string(u) || (ref != nil && ref.UID == u)) {
			return true
		}
	}
	return false
}

// outputUIDs are the UIDs whose output object xa may use: its own, and on a replay the earlier object's.
func outputUIDs(xa *actionsv1alpha1.ExternalAction) []types.UID {
	uids := []types.UID{xa.UID}
	if rf := xa.Status.ReplayedFrom; rf != nil && rf.UID != "" {
		uids = append(uids, types.UID(rf.UID))
	}
	return uids
}

// ErrConflict marks an output target that exists and was not written by the action.
var ErrConflict = errors.New("output target exists")

// CheckTarget runs before each claim of an action with spec.outputs: an object with the target's name
// that the action did not write would make the outputs impossible to write after the send, so nothing is sent
// while it exists (reason OutputConflict; the action resumes by itself once it is gone). It reads the object's
// metadata from the API server (an unlabelled object is not in the cache).
func (mgr *Manager) CheckTarget(ctx context.Context, xa *actionsv1alpha1.ExternalAction) error {
	if xa.Spec.Outputs == nil || mgr.APIReader == nil {
		return nil
	}
	kind, name := outputTarget(xa)
	m := outputMeta(kind)
	err := mgr.APIReader.Get(ctx, types.NamespacedName{Namespace: xa.Namespace, Name: name}, m)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s %s/%s (spec.outputs): %w", kind, xa.Namespace, name, err)
	case ownedOutput(m, xa.UID):
		return nil
	}
	return fmt.Errorf("%w: %s %s/%s exists and was not created by this action; nothing is sent while it exists, "+
		"because the outputs could not be written after the send and an existing object is never changed. "+
		"Delete or rename that %s, and the action proceeds", ErrConflict, kind, xa.Namespace, name, kind)
}

// newObject builds the target for values: labelled LabelOutput, annotated with the action's name and UID,
// and, unless outputs.retain, controlled by the action (ownerReference with controller true), so that garbage
// collection deletes it with the action.
func (mgr *Manager) newObject(xa *actionsv1alpha1.ExternalAction, values map[string]string) (client.Object, error) {
	kind, name := outputTarget(xa)
	om := metav1.ObjectMeta{
		Namespace:   xa.Namespace,
		Name:        name,
		Labels:      map[string]string{actionsv1alpha1.LabelOutput: "true"},
		Annotations: map[string]string{actionsv1alpha1.AnnotationOutputOf: xa.Name, actionsv1alpha1.AnnotationOutputOfUID: string(xa.UID)},
	}
	var obj client.Object
	if kind == kindConfigMap {
		obj = &corev1.ConfigMap{ObjectMeta: om, Data: values}
	} else {
		data := make(map[string][]byte, len(values))
		for k, v := range values {
			data[k] = []byte(v)
		}
		obj = &corev1.Secret{ObjectMeta: om, Type: corev1.SecretTypeOpaque, Data: data}
	}
	if !xa.Spec.Outputs.Retain {
		if err := controllerutil.SetControllerReference(xa, obj, mgr.Scheme); err != nil {
			return nil, fmt.Errorf("setting the output's ownerReference: %w", err)
		}
	}
	return obj, nil
}

// write creates the target with values. An existing object is never changed: it is already written when
// this action wrote it (a write repeated after a failed status write), and a conflict otherwise. Errors other
// than those outcomes are returned, and the values stay held.
func (mgr *Manager) write(ctx context.Context, xa *actionsv1alpha1.ExternalAction,
	values map[string]string) (actionsv1alpha1.OutputsStatus, string, error) {
	kind, name := outputTarget(xa)
	out := actionsv1alpha1.OutputsStatus{Kind: kind, Name: name}
	obj, err := mgr.newObject(xa, values)
	if err != nil {
		return out, "", err
	}
	err = mgr.Client.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		m := outputMeta(kind)
		if gerr := mgr.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), m); gerr != nil {
			return out, "", fmt.Errorf("reading the existing %s %s/%s: %w", kind, xa.Namespace, name, gerr)
		}
		if ownedOutput(m, xa.UID) {
			err = nil
		} else {
			out.Reason = actionsv1alpha1.ReasonOutputConflict
			return out, fmt.Sprintf("%s %s/%s exists and was not created by this action: it was not changed, and the "+
				"outputs were not written. The values are not kept; the recorded response is in status.response "+
				"(cut to %d bytes, Secret values redacted). Name a target that does not exist in the next action",
				kind, xa.Namespace, name, actionsv1alpha1.MaxResponseBodyLength), nil
		}
	}
	switch {
	case err == nil:
		out.Reason, out.Keys = actionsv1alpha1.ReasonOutputsWritten, slices.Sorted(maps.Keys(values))
		out.WrittenAt = &metav1.Time{Time: mgr.Clock.Now()}
		return out, fmt.Sprintf("succeeded; the outputs were written to %s %s/%s (keys %s)", kind, xa.Namespace, name,
			strings.Join(out.Keys, ", ")), nil
	case apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err):
		out.Reason = actionsv1alpha1.ReasonOutputRefused
		return out, fmt.Sprintf("the API server refused %s %s/%s (%s): the outputs were not written, and nothing is "+
			"sent again. Keep the values under the 1 MiB limit of a %s in the next action", kind, xa.Namespace, name,
			status.InvalidFields(err), kind), nil
	}
	return out, "", fmt.Errorf("creating %s %s/%s (spec.outputs; the values stay in memory): %w", kind, xa.Namespace, name, err)
}

// Settle decides and records how the outputs of xa, a Succeeded action read from the API server with
// status.outputs unset, end: written from the values held in memory (or their failed expression), else found
// written by this action before a restart, else (a replay) the retained target of the earlier object, else
// lost (OutputLost) or never available (OutputsNotAvailable). The values are dropped from memory once the
// decision is recorded.
func (mgr *Manager) Settle(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (ctrl.Result, error) {
	kind, name := outputTarget(xa)
	out := actionsv1alpha1.OutputsStatus{Kind: kind, Name: name}
	var msg string
	h := mgr.heldFor(xa)
	if h != nil && h.view != nil {
		// The evaluation slot is taken without a wait: a reconcile worker never waits behind other tenants'
		// evaluations (expr.HoldSlot); without one the action keeps its place in its namespace's queue and is
		// woken when its turn comes, the requeue only a safety net.
		nn := client.ObjectKeyFromObject(xa)
		hctx, release, ok := expr.HoldSlot(ctx, xa.Namespace, nn.String(), func() {
			if mgr.Wake != nil {
				mgr.Wake(nn)
			}
		})
		if !ok {
			return ctrl.Result{RequeueAfter: requeue.Room}, nil
		}
		var wait time.Duration
		h, wait = mgr.retake(hctx, xa, h)
		release()
		if wait > 0 {
			log.FromContext(ctx).V(1).Info("the outputs' evaluation did not finish; evaluating them again later",
				"wait", wait, "error", h.err.Error())
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	switch {
	case h != nil && h.err != nil:
		out.Reason = actionsv1alpha1.ReasonOutputExpressionFailed
		msg = fmt.Sprintf("%v; nothing was written to %s %s/%s, and nothing is sent again. The recorded response is in "+
			"status.response; correct the expression in the next action", h.err, kind, xa.Namespace, name)
	case h != nil:
		var err error
		if out, msg, err = mgr.write(ctx, xa, h.values); err != nil {
			return ctrl.Result{}, err
		}
	default:
		var err error
		if out, msg, err = mgr.find(ctx, xa); err != nil {
			if e, ok := errors.AsType[*outputsHeldElsewhere](err); ok {
				log.FromContext(ctx).V(1).Info("outputs not held here; waiting for the shard that may hold them", "wait", e.wait)
				return ctrl.Result{RequeueAfter: e.wait}, nil
			}
			return ctrl.Result{}, err
		}
	}
	env := mgr.Env(xa)
	step := ledger.SettleOutputs(&xa.Status, out, msg, env)
	if step.Status == nil {
		mgr.held.Delete(client.ObjectKeyFromObject(xa))
		return ctrl.Result{}, nil
	}
	// On a Conflict the values stay held: the next try finds the object it wrote (writeOutputs) and records it.
	res, written, err := mgr.writeStep(ctx, xa, step)
	if written {
		mgr.held.Delete(client.ObjectKeyFromObject(xa))
	}
	return res, err
}

// find settles outputs of which nothing is held in memory, from what exists: the target written by this
// action (the process stopped after the write and before recording it), the retained target of the earlier
// object on a replay (OutputsRetained), or nothing: OutputLost when the values were held by a process that is
// gone, OutputsNotAvailable when the outcome never had a response to take them from.
func (mgr *Manager) find(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (actionsv1alpha1.OutputsStatus, string, error) {
	kind, name := outputTarget(xa)
	out := actionsv1alpha1.OutputsStatus{Kind: kind, Name: name}
	var obj client.Object = &corev1.Secret{}
	if kind == kindConfigMap {
		obj = &corev1.ConfigMap{}
	}
	err := mgr.APIReader.Get(ctx, types.NamespacedName{Namespace: xa.Namespace, Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		return out, "", fmt.Errorf("reading %s %s/%s (spec.outputs): %w", kind, xa.Namespace, name, err)
	}
	// Ours, or (a replay) retained by the earlier object: without an ownerReference, so garbage collection is not
	// about to delete it with that object.
	retained := err == nil && !ownedOutput(obj, xa.UID) && ownedOutput(obj, outputUIDs(xa)...) && metav1.GetControllerOfNoCopy(obj) == nil
	if err == nil && (ownedOutput(obj, xa.UID) || retained) {
		out.Reason, out.WrittenAt = actionsv1alpha1.ReasonOutputsWritten, &metav1.Time{Time: mgr.Clock.Now()}
		if retained {
			out.Reason = actionsv1alpha1.ReasonOutputsRetained
		}
		switch o := obj.(type) {
		case *corev1.Secret:
			out.Keys = slices.Sorted(maps.Keys(o.Data))
		case *corev1.ConfigMap:
			out.Keys = slices.Sorted(maps.Keys(o.Data))
		}
		if len(out.Keys) > actionsv1alpha1.MaxOutputValues {
			out.Keys = out.Keys[:actionsv1alpha1.MaxOutputValues]
		}
		if out.Reason == actionsv1alpha1.ReasonOutputsRetained {
			return out, fmt.Sprintf("replayed; %s %s/%s, retained from the earlier object %s with the same key and "+
				"fingerprint, holds its outputs and is used as it is", kind, xa.Namespace, name, xa.Status.ReplayedFrom.UID), nil
		}
		return out, fmt.Sprintf("succeeded; the outputs were written to %s %s/%s", kind, xa.Namespace, name), nil
	}
	if ledger.OutputsHeld(&xa.Status) {
		if wait := mgr.lostGrace(xa); wait > 0 {
			return out, "", &outputsHeldElsewhere{wait: wait}
		}
		out.Reason = actionsv1alpha1.ReasonOutputLost
		return out, fmt.Sprintf("the manager stopped (or lost leadership) after recording Succeeded and before writing %s "+
			"%s/%s: the values were held only in its memory and are lost, and nothing is sent again. The recorded "+
			"response is in status.response (cut to %d bytes, Secret values redacted)", kind, xa.Namespace, name,
			actionsv1alpha1.MaxResponseBodyLength), nil
	}
	out.Reason = actionsv1alpha1.ReasonOutputsNotAvailable
	why := "the outcome did not come from a response of this action"
	for _, c := range xa.Status.Conditions {
		if c.Type == actionsv1alpha1.ConditionOutputsReady {
			why = c.Message
		}
	}
	msg := fmt.Sprintf("%s; nothing was written to %s %s/%s", why, kind, xa.Namespace, name)
	if xa.Status.ReplayedFrom != nil {
		msg += ". With spec.outputs.retain: true the earlier object's " + kind + " outlives it and a replay uses it"
	}
	return out, msg, nil
}

// Reconcile handles spec.outputs of a Succeeded action (cached: possibly trimmed): settle outputs not
// yet settled (on a copy read from the API server), or notice that a written target is gone (OutputMissing; it
// is not re-created). done reports that the caller returns res and err.
func (mgr *Manager) Reconcile(ctx context.Context, cached *actionsv1alpha1.ExternalAction) (ctrl.Result, bool, error) {
	out := cached.Status.Outputs
	if out != nil && out.Reason != actionsv1alpha1.ReasonOutputsWritten && out.Reason != actionsv1alpha1.ReasonOutputsRetained {
		mgr.held.Delete(client.ObjectKeyFromObject(cached))
		return ctrl.Result{}, false, nil
	}
	if out != nil {
		gone, err := mgr.gone(ctx, cached)
		if err != nil || !gone {
			return ctrl.Result{}, err != nil, err
		}
	}
	xa := &actionsv1alpha1.ExternalAction{}
	if err := mgr.APIReader.Get(ctx, client.ObjectKeyFromObject(cached), xa); err != nil {
		return ctrl.Result{}, true, client.IgnoreNotFound(err)
	}
	if xa.Status.Phase != actionsv1alpha1.PhaseSucceeded || !xa.DeletionTimestamp.IsZero() {
		return ctrl.Result{RequeueAfter: requeue.Now}, true, nil
	}
	if xa.Status.Outputs == nil {
		res, err := mgr.Settle(ctx, xa)
		return res, true, err
	}
	if out == nil || xa.Status.Outputs.Reason != out.Reason {
		return ctrl.Result{RequeueAfter: requeue.Now}, true, nil // the cache is behind
	}
	missing := *xa.Status.Outputs
	missing.Reason = actionsv1alpha1.ReasonOutputMissing
	step := ledger.SettleOutputs(&xa.Status, missing, fmt.Sprintf("%s %s/%s was deleted after the outputs were written; "+
		"it is not re-created, because the values are kept nowhere else, and nothing is sent again",
		missing.Kind, xa.Namespace, missing.Name), mgr.Env(xa))
	res, _, err := mgr.writeStep(ctx, xa, step)
	return res, true, err
}

// writeStep writes a step of ledger.SettleOutputs with the status writer (the phase stays Succeeded, so none
// of the terminal bookkeeping is repeated); written reports that it was written. A Conflict looks again
// shortly (requeue.Conflict).
func (mgr *Manager) writeStep(ctx context.Context, xa *actionsv1alpha1.ExternalAction,
	step ledger.Step) (res ctrl.Result, written bool, err error) {
	if step.Status == nil {
		return ctrl.Result{}, false, nil
	}
	upd, err := mgr.Writer.Apply(ctx, xa, step, "")
	if err != nil {
		return ctrl.Result{}, false, err
	}
	if upd == nil {
		return ctrl.Result{RequeueAfter: requeue.Conflict}, false, nil
	}
	log.FromContext(ctx).Info("outputs settled", "reason", upd.Status.Outputs.Reason, "kind", upd.Status.Outputs.Kind,
		"name", upd.Status.Outputs.Name, "keys", len(upd.Status.Outputs.Keys))
	return requeue.At(step.At, mgr.Clock.Now()), true, nil
}

// gone reports whether the written target of xa no longer exists (or was replaced by an object the action
// did not write). The label-filtered metadata cache answers "present"; "absent" is confirmed with the API server,
// since the cache may not have seen the object just created.
func (mgr *Manager) gone(ctx context.Context, xa *actionsv1alpha1.ExternalAction) (bool, error) {
	kind, name := xa.Status.Outputs.Kind, xa.Status.Outputs.Name
	key := types.NamespacedName{Namespace: xa.Namespace, Name: name}
	m := outputMeta(kind)
	if err := mgr.Client.Get(ctx, key, m); err == nil && ownedOutput(m, outputUIDs(xa)...) {
		return false, nil
	}
	m = outputMeta(kind)
	err := mgr.APIReader.Get(ctx, key, m)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading %s %s/%s (status.outputs): %w", kind, xa.Namespace, name, err)
	}
	return !ownedOutput(m, outputUIDs(xa)...), nil
}

// ActionOf maps an output object (metadata from the label-filtered cache) to the action that wrote it.
func ActionOf(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetAnnotations()[actionsv1alpha1.AnnotationOutputOf]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// LostGrace is how long after an action's completedAt a sharded manager (--watch-label-selector) that
// holds no output values waits before it records OutputLost: the shard the action was moved away from may
// still hold them and be writing the target (its movedAway path). Two shard lease durations (30 s).
const LostGrace = 30 * time.Second

// outputsHeldElsewhere: findOutputs found neither values nor a target, but another shard may still hold the
// values; ask again after wait.
type outputsHeldElsewhere struct{ wait time.Duration }

func (e *outputsHeldElsewhere) Error() string {
	return fmt.Sprintf("the outputs may be held by another shard; asking again in %s", e.wait)
}

// lostGrace returns how much longer a manager must wait before recording OutputLost on xa: only a
// sharded manager waits (another shard may hold the values), until LostGrace after completedAt.
func (mgr *Manager) lostGrace(xa *actionsv1alpha1.ExternalAction) time.Duration {
	if !mgr.Sharded || xa.Status.CompletedAt == nil {
		return 0
	}
	return max(xa.Status.CompletedAt.Add(LostGrace).Sub(mgr.Clock.Now()), 0)
}
