// Package plugin is "kubectl actionledger", the kubectl plugin for ExternalActions (the kubectl-actionledger
// binary in cmd/kubectl-actionledger). Its commands read the ledger that the controller keeps in each
// ExternalAction's status and in the ActionTombstones, and say in plain words what is going on:
//
//   - why NAME: the current state and what to do next;
//   - history NAME: the attempt table;
//   - resolve NAME applied|not-applied|retry --reason TEXT: a person's decision on an OutcomeUnknown or
//     Exhausted action, given as the annotations actions.actionledger.dev/resolve and resolve-reason;
//   - tombstones: the keys that outlive their objects;
//   - check -f FILE: for each ExternalAction of a manifest, whether applying it would send, replay a recorded
//     outcome, be refused as a conflict, or change nothing. It only reads.
//
// The connection flags are k8s.io/cli-runtime's genericclioptions.ConfigFlags, so -n, --kubeconfig, --context
// and the rest behave as in kubectl and every other plugin. Only resolve writes, with a merge patch that
// carries the resourceVersion it checked the phase on (a concurrent change fails with a conflict instead of
// annotating an action that moved on).
package plugin

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// Plugin runs the commands against one API server, in one namespace.
type Plugin struct {
	// Client reads (and, for resolve, patches) ExternalActions, Destinations and ActionTombstones.
	Client client.Client
	// Namespace is the namespace of the named objects (kubectl's -n, or the kubeconfig context's namespace).
	Namespace string
	// Out receives the command's output; ErrOut receives warnings.
	Out, ErrOut io.Writer
	// Now is the clock for "in 12s" and expiry decisions; time.Now when nil.
	Now func() time.Time
}

func (p *Plugin) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Scheme holds the types the plugin reads: the Kubernetes built-ins and actionledger's API.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering client-go types: %w", err)
	}
	if err := actionsv1alpha1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering actionledger types: %w", err)
	}
	return s, nil
}

// NewCommand returns the root "kubectl actionledger" command. The streams are where output goes (kubectl
// plugins write to stdout/stderr; tests pass buffers).
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	flags := genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:         "actionledger",
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl actionledger"},
		Short:       "Explain, inspect and decide actionledger ExternalActions",
		Long: "kubectl actionledger reads the ledger the actionledger controller keeps in each ExternalAction's status\n" +
			"and in its ActionTombstones, and says what is going on and what to do next.",
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetIn(streams.In)
	flags.AddFlags(root.PersistentFlags())

	run := runner(flags, streams)
	root.AddCommand(&cobra.Command{
		Use:   "why NAME",
		Short: "Say in plain words what state an ExternalAction is in and what to do next",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(func(ctx context.Context, p *Plugin) error { return p.Why(ctx, args[0]) })(cmd, args)
		},
	})
	root.AddCommand(&cobra.Command{
		Use:   "history NAME",
		Short: "Print an ExternalAction's attempts: number, start, finish, result, code or error class, Retry-After",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(func(ctx context.Context, p *Plugin) error { return p.History(ctx, args[0]) })(cmd, args)
		},
	})
	addLedgerCommands(root, run)
	return root
}

// runFunc turns what a subcommand does with a connected Plugin into its cobra RunE.
type runFunc func(f func(ctx context.Context, p *Plugin) error) func(*cobra.Command, []string) error

// runner returns the runFunc that connects a Plugin from the connection flags when a subcommand runs.
func runner(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) runFunc {
	// connect builds a Plugin from the connection flags, when a subcommand runs.
	connect := func() (*Plugin, error) {
		cfg, err := flags.ToRESTConfig()
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig: %w", err)
		}
		ns, _, err := flags.ToRawKubeConfigLoader().Namespace()
		if err != nil {
			return nil, fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
		}
		s, err := Scheme()
		if err != nil {
			return nil, err
		}
		c, err := client.New(cfg, client.Options{Scheme: s})
		if err != nil {
			return nil, fmt.Errorf("connecting to the API server: %w", err)
		}
		return &Plugin{Client: c, Namespace: ns, Out: streams.Out, ErrOut: streams.ErrOut}, nil
	}
	run := func(f func(ctx context.Context, p *Plugin) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			p, err := connect()
			if err != nil {
				return err
			}
			return f(cmd.Context(), p)
		}
	}

	return run
}

// addLedgerCommands adds resolve, tombstones and check to root.
func addLedgerCommands(root *cobra.Command, run runFunc) {
	var reason string
	resolve := &cobra.Command{
		Use:   "resolve NAME applied|not-applied|retry --reason TEXT",
		Short: "Decide an OutcomeUnknown or Exhausted ExternalAction",
		Long: "resolve sets the annotations actions.actionledger.dev/resolve and actions.actionledger.dev/resolve-reason;\n" +
			"the controller records the decision in status.resolution, emits an Event and removes the annotations.\n" +
			"  applied      the effect happened: mark the action Succeeded without sending\n" +
			"  not-applied  the effect did not happen and should not: mark the action Failed\n" +
			"  retry        one more attempt under the same idempotency key",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(func(ctx context.Context, p *Plugin) error { return p.Resolve(ctx, args[0], args[1], reason) })(cmd, args)
		},
	}
	resolve.Flags().StringVar(&reason, "reason", "", "why you decided so (copied to status.resolution.reason); recommended")
	root.AddCommand(resolve)
	var all bool
	tombstones := &cobra.Command{
		Use:   "tombstones",
		Short: "List ActionTombstones: key, fingerprint, phase, code and when each expires",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(func(ctx context.Context, p *Plugin) error { return p.Tombstones(ctx, all) })(cmd, args)
		},
	}
	tombstones.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list the tombstones of every namespace")
	root.AddCommand(tombstones)
	var file string
	check := &cobra.Command{
		Use:   "check -f FILE",
		Short: "Say for each ExternalAction of a manifest whether applying it would send, replay, conflict or change nothing",
		Long: "check reads every document of FILE (- for standard input) and, for each ExternalAction, compares its\n" +
			"fingerprint with the live object and the tombstone of its name. It creates nothing.\n" +
			"Exit status 1 when an action would be refused as a conflict or cannot be read.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(func(ctx context.Context, p *Plugin) error {
				in, name, closeFn, err := openFile(file, cmd.InOrStdin())
				if err != nil {
					return err
				}
				defer closeFn()
				return p.Check(ctx, in, name)
			})(cmd, args)
		},
	}
	check.Flags().StringVarP(&file, "filename", "f", "", "manifest to check (YAML or JSON, several documents allowed; - reads standard input)")
	_ = check.MarkFlagRequired("filename")
	root.AddCommand(check)
}
