package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/actionledger/actionledger/internal/scheme"
	"github.com/actionledger/actionledger/internal/uninstall"
)

// uninstallCmd is `actionledger uninstall` (the Helm chart's pre-delete hook, docs/uninstall.md): it stops the
// manager, writes the tombstone of every action without an open attempt and removes its ledger finalizer, so that
// a namespace holding actions can be deleted once actionledger is gone. Actions with an open attempt keep the
// finalizer; they are listed, the manager is started again to finish them, and the command fails (exit 1), so that
// `helm uninstall` stops and says so. Exit 2: bad flags or an error.
func uninstallCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	manager := fs.String("manager-deployment", "",
		"the manager's Deployment, as namespace/name, scaled to 0 first (empty: none running)")
	namespace := fs.String("namespace", "", "release the actions of this namespace only (default: every namespace)")
	stopTimeout := fs.Duration("stop-timeout", 2*time.Minute, "how long to wait for the manager's pods to stop")
	restore := fs.Bool("restore", true, "start the manager again when an action is held, so that it finishes it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o := uninstall.Options{Namespace: *namespace, StopTimeout: *stopTimeout, Out: stdout}
	if *manager != "" {
		ns, name, ok := strings.Cut(*manager, "/")
		if !ok || ns == "" || name == "" {
			_, _ = fmt.Fprintf(stderr, "--manager-deployment %q: want namespace/name\n", *manager)
			return 2
		}
		o.Manager = types.NamespacedName{Namespace: ns, Name: name}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "actionledger uninstall: %v\n", err)
		return 2
	}
	if o.Client, err = client.New(cfg, client.Options{Scheme: scheme.Scheme}); err != nil {
		_, _ = fmt.Fprintf(stderr, "actionledger uninstall: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := uninstall.Run(ctx, o)
	if err == nil {
		return 0
	}
	_, _ = fmt.Fprintf(stderr, "actionledger uninstall: %v\n", err)
	if *restore {
		if rerr := uninstall.Restore(context.Background(), o, rep.ManagerReplicas); rerr != nil {
			_, _ = fmt.Fprintf(stderr, "actionledger uninstall: starting the manager again: %v\n", rerr)
		}
	}
	if errors.Is(err, uninstall.ErrHeld) {
		return 1
	}
	return 2
}
