package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// ErrRefused is returned (wrapped) by Resolve for an action in a phase that takes no decision, and by Check
// when an action would be refused; the binary exits 1 on it as on any error.
var ErrRefused = errors.New("refused")

func (p *Plugin) getAction(ctx context.Context, name string) (*actionsv1alpha1.ExternalAction, error) {
	xa := &actionsv1alpha1.ExternalAction{}
	if err := p.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, xa); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("externalaction %s/%s not found (kubectl actionledger why %s says whether a tombstone holds its key)",
				p.Namespace, name, name)
		}
		return nil, fmt.Errorf("reading externalaction %s/%s: %w", p.Namespace, name, err)
	}
	return xa, nil
}

// History prints the action's attempts, oldest first: the finished ones from status.attemptHistory (the last
// 10) and the open claim, if any. A first attempt that succeeded has no history entry (the lean happy path):
// it is printed from attempts, completedAt and the response, with its start unknown ("-").
func (p *Plugin) History(ctx context.Context, name string) error {
	xa, err := p.getAction(ctx, name)
	if err != nil {
		return err
	}
	st := &xa.Status
	if len(st.AttemptHistory) == 0 && st.Claim == nil && st.Attempts == 1 && st.Phase == actionsv1alpha1.PhaseSucceeded &&
		st.Response != nil && st.ReplayedFrom == nil {
		st.AttemptHistory = []actionsv1alpha1.AttemptRecord{{Number: 1, FinishedAt: st.CompletedAt, Result: "Success",
			StatusCode: st.Response.StatusCode}}
	}
	if len(st.AttemptHistory) == 0 && st.Claim == nil {
		_, _ = fmt.Fprintf(p.Out, "No attempts yet (phase %s).\n", orPending(st.Phase))
		return nil
	}
	if first := st.AttemptHistory; len(first) > 0 && first[0].Number > 1 {
		_, _ = fmt.Fprintf(p.Out, "Showing the last %d of %d attempts (status keeps the last 10).\n", len(first), st.Attempts)
	}
	tw := tabwriter.NewWriter(p.Out, 0, 4, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ATTEMPT\tSTARTED\tFINISHED\tRESULT\tCODE/ERROR\tRETRY-AFTER\tTRACE")
	for _, a := range st.AttemptHistory {
		finished := "-"
		if a.FinishedAt != nil {
			finished = stamp(a.FinishedAt.Time)
		}
		outcome := a.ErrorClass
		if a.StatusCode != 0 {
			outcome = strconv.Itoa(int(a.StatusCode))
		}
		started := "-"
		if !a.StartedAt.IsZero() {
			started = stamp(a.StartedAt.Time)
		}
		_, _ = fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Number, started, finished, a.Result, dash(outcome),
			dash(a.RetryAfter), dash(a.TraceID))
	}
	if c := st.Claim; c != nil {
		_, _ = fmt.Fprintf(tw, "%d\t%s\t-\topen (claim expires %s)\t-\t-\t-\n", c.Attempt, stamp(c.StartedAt.Time), stamp(c.ExpiresAt.Time))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return p.deadLetter(st.DeadLetter)
}

// deadLetter prints where the action's dead-letter record stands (status.deadLetter), if it has one.
func (p *Plugin) deadLetter(dl *actionsv1alpha1.DeadLetterStatus) error {
	if dl == nil {
		return nil
	}
	code := ""
	if dl.StatusCode != 0 {
		code = fmt.Sprintf(", last status %d", dl.StatusCode)
	}
	_, err := fmt.Fprintf(p.Out, "Dead letter to %s: %s after %d attempt(s)%s: %s\n", dl.Sink, dl.State, dl.Attempts, code, dl.Message)
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orPending(p actionsv1alpha1.Phase) actionsv1alpha1.Phase {
	if p == "" {
		return actionsv1alpha1.PhasePending
	}
	return p
}

// Resolve sets the decision annotations on an OutcomeUnknown or Exhausted action. The patch carries the
// resourceVersion the phase was checked on, so an action that changed meanwhile is not annotated.
func (p *Plugin) Resolve(ctx context.Context, name, decision, reason string) error {
	switch decision {
	case actionsv1alpha1.DecisionApplied, actionsv1alpha1.DecisionNotApplied, actionsv1alpha1.DecisionRetry:
	default:
		return fmt.Errorf("unknown decision %q: use %s, %s or %s", decision,
			actionsv1alpha1.DecisionApplied, actionsv1alpha1.DecisionNotApplied, actionsv1alpha1.DecisionRetry)
	}
	xa, err := p.getAction(ctx, name)
	if err != nil {
		return err
	}
	if ph := xa.Status.Phase; ph != actionsv1alpha1.PhaseOutcomeUnknown && ph != actionsv1alpha1.PhaseExhausted {
		return fmt.Errorf("%w: externalaction %s/%s is %s; only OutcomeUnknown and Exhausted actions take a decision "+
			"(kubectl actionledger why %s)", ErrRefused, xa.Namespace, xa.Name, orPending(ph), xa.Name)
	}
	base := xa.DeepCopy()
	if xa.Annotations == nil {
		xa.Annotations = map[string]string{}
	}
	xa.Annotations[actionsv1alpha1.AnnotationResolve] = decision
	if reason != "" {
		xa.Annotations[actionsv1alpha1.AnnotationResolveReason] = reason
	} else {
		delete(xa.Annotations, actionsv1alpha1.AnnotationResolveReason)
	}
	patch := client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
	if err := p.Client.Patch(ctx, xa, patch); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("externalaction %s/%s changed while deciding; look again (kubectl actionledger why %s): %w",
				xa.Namespace, xa.Name, xa.Name, err)
		}
		return fmt.Errorf("annotating externalaction %s/%s: %w", xa.Namespace, xa.Name, err)
	}
	_, _ = fmt.Fprintf(p.Out, "externalaction/%s: decision %q set (was %s); the controller records it in status.resolution "+
		"and removes the annotation. Follow it with: kubectl actionledger why %s\n", xa.Name, decision, xa.Status.Phase, xa.Name)
	return nil
}

// Tombstones lists the ActionTombstones of the namespace, or of every namespace.
func (p *Plugin) Tombstones(ctx context.Context, allNamespaces bool) error {
	list := &actionsv1alpha1.ActionTombstoneList{}
	var opts []client.ListOption
	if !allNamespaces {
		opts = append(opts, client.InNamespace(p.Namespace))
	}
	if err := p.Client.List(ctx, list, opts...); err != nil {
		return fmt.Errorf("listing actiontombstones: %w", err)
	}
	if len(list.Items) == 0 {
		where := "in namespace " + p.Namespace
		if allNamespaces {
			where = "in any namespace"
		}
		_, _ = fmt.Fprintf(p.Out, "No tombstones %s.\n", where)
		return nil
	}
	tw := tabwriter.NewWriter(p.Out, 0, 4, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, "KEY\tFINGERPRINT\tPHASE\tCODE\tEXPIRES")
	now := p.now()
	for _, ts := range list.Items {
		code := "-"
		if ts.Spec.StatusCode != 0 {
			code = strconv.Itoa(int(ts.Spec.StatusCode))
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s (%s)\n", ts.Spec.Key, ts.Spec.Fingerprint, ts.Spec.Phase, code,
			stamp(ts.Spec.ExpiresAt.Time), until(now, ts.Spec.ExpiresAt.Time))
	}
	return tw.Flush()
}

// openFile opens the -f argument of check ("-" is in).
func openFile(name string, in io.Reader) (io.Reader, string, func(), error) {
	if name == "-" {
		return in, "standard input", func() {}, nil
	}
	f, err := os.Open(name) //nolint:gosec // the user names the manifest to read
	if err != nil {
		return nil, "", nil, fmt.Errorf("opening the manifest: %w", err)
	}
	return f, name, func() { _ = f.Close() }, nil
}

// shorten cuts a fingerprint to "sha256:" and 12 hex digits for tables.
func shorten(fp string) string {
	if len(fp) > len("sha256:")+12 && strings.HasPrefix(fp, "sha256:") {
		return fp[:len("sha256:")+12]
	}
	return fp
}
