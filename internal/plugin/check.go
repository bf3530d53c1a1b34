package plugin

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/manifest"
)

// Outcome is what applying one ExternalAction of a manifest would do.
type Outcome string

const (
	// OutcomeSend: the key is new (no live object, no tombstone inside its horizon): it would be sent.
	OutcomeSend Outcome = "send"
	// OutcomeReplay: a tombstone holds the same fingerprint and a finished outcome: the outcome is replayed and
	// nothing is sent.
	OutcomeReplay Outcome = "replay"
	// OutcomeExists: the live object has the same fingerprint: applying changes nothing and sends nothing.
	OutcomeExists Outcome = "exists"
	// OutcomeConflict: the live object or a tombstone binds the key to another fingerprint: the API server
	// refuses the change (live object) or the action ends Conflict (tombstone); nothing is sent.
	OutcomeConflict Outcome = "conflict"
)

// Verdict is Check's answer for one action.
type Verdict struct {
	Outcome Outcome
	// Detail says why, in words.
	Detail string
}

// Judge decides what applying an action with fingerprint fp would do, from the live object and the tombstone
// of its name (either may be nil), by the rules the controller applies: a live object is the action itself
// (its status.fingerprint, or its spec's fingerprint before the controller recorded one); a tombstone counts
// until its expiresAt; inside it, another fingerprint is a conflict, the same fingerprint replays a finished
// outcome, and the tombstone of an object that went before it finished lets the new object continue (a send).
func Judge(fp string, live *actionsv1alpha1.ExternalAction, ts *actionsv1alpha1.ActionTombstone, now time.Time) (Verdict, error) {
	if live != nil {
		liveFP := live.Status.Fingerprint
		if liveFP == "" {
			var err error
			if liveFP, err = fingerprint.Compute(&live.Spec); err != nil {
				return Verdict{}, fmt.Errorf("fingerprinting the live object: %w", err)
			}
		}
		phase := orPending(live.Status.Phase)
		if liveFP == fp {
			return Verdict{OutcomeExists, fmt.Sprintf("already there (%s); applying it again sends nothing", phase)}, nil
		}
		return Verdict{OutcomeConflict, fmt.Sprintf("the live object (%s) has fingerprint %s: the API server refuses the change "+
			"(destinationRef, request and successWhen are immutable); use a new name for a new action", phase, shorten(liveFP))}, nil
	}
	if ts != nil && now.Before(ts.Spec.ExpiresAt.Time) {
		if ts.Spec.Fingerprint != fp {
			return Verdict{OutcomeConflict, fmt.Sprintf("the tombstone of an earlier object (%s) binds the key to fingerprint %s "+
				"until %s: it would end Conflict and send nothing; use a new name", ts.Spec.Phase, shorten(ts.Spec.Fingerprint),
				stamp(ts.Spec.ExpiresAt.Time))}, nil
		}
		if ts.Spec.Phase.Terminal() {
			code := ""
			if ts.Spec.StatusCode != 0 {
				code = fmt.Sprintf(", status %d", ts.Spec.StatusCode)
			}
			return Verdict{OutcomeReplay, fmt.Sprintf("a tombstone holds its outcome (%s%s) until %s: it would be replayed without a send",
				ts.Spec.Phase, code, stamp(ts.Spec.ExpiresAt.Time))}, nil
		}
		return Verdict{OutcomeSend, fmt.Sprintf("an earlier object under this key went before it finished (%s): it would continue "+
			"under the same key and be sent", ts.Spec.Phase)}, nil
	}
	if ts != nil {
		return Verdict{OutcomeSend, fmt.Sprintf("new key (the tombstone's horizon ended at %s): it would be sent", stamp(ts.Spec.ExpiresAt.Time))}, nil
	}
	return Verdict{OutcomeSend, "new key: it would be sent"}, nil
}

// Check prints, for each ExternalAction of the manifest in r, its Verdict, and names what the manifest holds
// besides. It reads only. It returns an error wrapping ErrRefused when some action would be a conflict or
// cannot be read, so that the exit status tells a CI job.
func (p *Plugin) Check(ctx context.Context, r io.Reader, file string) error {
	res, readErr := manifest.Read(r)
	for _, s := range res.Skipped {
		_, _ = fmt.Fprintf(p.ErrOut, "%s: skipped %s\n", file, s)
	}
	if readErr != nil {
		return fmt.Errorf("reading %s: %w", file, readErr)
	}
	if len(res.Actions) == 0 {
		if res.Invalid() {
			return fmt.Errorf("%w: %s holds no readable ExternalAction", ErrRefused, file)
		}
		return fmt.Errorf("%s holds no ExternalAction", file)
	}
	tw := tabwriter.NewWriter(p.Out, 0, 4, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NAMESPACE\tNAME\tFINGERPRINT\tRESULT\tDETAIL")
	refused := res.Invalid()
	now := p.now()
	for _, xa := range res.Actions {
		ns := xa.Namespace
		if ns == "" {
			ns = p.Namespace
		}
		fp, err := fingerprint.Compute(&xa.Spec)
		if err != nil {
			_, _ = fmt.Fprintf(tw, "%s\t%s\t-\tinvalid\t%v\n", ns, xa.Name, err)
			refused = true
			continue
		}
		v, err := p.judge(ctx, ns, xa.Name, fp, now)
		if err != nil {
			return err
		}
		if v.Outcome == OutcomeConflict {
			refused = true
		}
		if v.Outcome == OutcomeSend {
			v.Detail += p.destinationNote(ctx, ns, xa)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ns, xa.Name, shorten(fp), v.Outcome, v.Detail)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	if refused {
		return fmt.Errorf("%w: some actions of %s would not be sent as written", ErrRefused, file)
	}
	return nil
}

func (p *Plugin) judge(ctx context.Context, ns, name, fp string, now time.Time) (Verdict, error) {
	key := client.ObjectKey{Namespace: ns, Name: name}
	live := &actionsv1alpha1.ExternalAction{}
	if err := p.Client.Get(ctx, key, live); apierrors.IsNotFound(err) {
		live = nil
	} else if err != nil {
		return Verdict{}, fmt.Errorf("reading externalaction %s/%s: %w", ns, name, err)
	}
	var ts *actionsv1alpha1.ActionTombstone
	if live == nil {
		ts = &actionsv1alpha1.ActionTombstone{}
		if err := p.Client.Get(ctx, key, ts); apierrors.IsNotFound(err) {
			ts = nil
		} else if err != nil {
			return Verdict{}, fmt.Errorf("reading actiontombstone %s/%s: %w", ns, name, err)
		}
	}
	return Judge(fp, live, ts, now)
}

// destinationNote adds whether the action's destination exists and is Ready (an action would wait otherwise).
func (p *Plugin) destinationNote(ctx context.Context, ns string, xa *actionsv1alpha1.ExternalAction) string {
	kind, name := xa.Spec.DestinationRef.Kind, xa.Spec.DestinationRef.Name
	var conds []metav1.Condition
	var err error
	if kind == kindClusterDestination {
		d := &actionsv1alpha1.ClusterDestination{}
		err = p.Client.Get(ctx, client.ObjectKey{Name: name}, d)
		conds = d.Status.Conditions
	} else {
		kind = kindDestination
		d := &actionsv1alpha1.Destination{}
		err = p.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d)
		conds = d.Status.Conditions
	}
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf(" once %s %s exists (it does not: the action would wait)", kind, name)
	case err != nil:
		return "" // e.g. not allowed to read it: say nothing rather than guess
	}
	if c := meta.FindStatusCondition(conds, actionsv1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		return fmt.Sprintf(" once %s %s is Ready (it is not: %s)", kind, name, c.Reason)
	}
	return fmt.Sprintf(" to %s %s", kind, name)
}
