package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/manifest"
)

const fingerprintUsage = `Usage: actionledger fingerprint [-f FILE] [--canonical]

Prints "NAME FINGERPRINT" for every ExternalAction in FILE, one per line, exactly as the controller computes
status.fingerprint. FILE is YAML or JSON and may hold several documents ("---") and Lists; every other object
is named on standard error as skipped. Without -f (or with -f -) the manifest is read from standard input.

Exit status: 0 when every ExternalAction was fingerprinted, 1 when one could not be read or none was found,
2 for a usage error.

Flags:
`

// stdinIsTerminal reports whether r is an interactive terminal (isatty), so that "actionledger fingerprint"
// without -f prints its usage instead of waiting for input nobody is going to type.
func stdinIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd())) //nolint:gosec // a file descriptor fits in an int
}

// fingerprintCmd prints the fingerprint of every ExternalAction in a manifest (see fingerprintUsage).
// isTerminal decides whether stdin is interactive (stdinIsTerminal outside tests).
func fingerprintCmd(args []string, stdin io.Reader, stdout, stderr io.Writer, isTerminal func(io.Reader) bool) int {
	fs := flag.NewFlagSet("fingerprint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "manifest file (YAML or JSON, several documents allowed); - or none reads standard input")
	canonical := fs.Bool("canonical", false, "after each line, print the RFC 8785 canonical JSON that is hashed")
	fs.Usage = func() {
		_, _ = fmt.Fprint(stderr, fingerprintUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "actionledger fingerprint: unexpected argument %q (use -f FILE)\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	in, name := stdin, "standard input"
	switch *file {
	case "":
		if isTerminal(stdin) {
			fs.Usage()
			return 2
		}
	case "-":
	default:
		f, err := os.Open(*file) //nolint:gosec // the user names the manifest to read
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "actionledger fingerprint: %v\n", err)
			return 1
		}
		defer func() { _ = f.Close() }()
		in, name = f, *file
	}
	return printFingerprints(in, name, *canonical, stdout, stderr)
}

// printFingerprints prints "NAME FINGERPRINT" (and with canonical the hashed RFC 8785 JSON) for each
// ExternalAction read from in, and returns the exit status: 1 when something could not be read or hashed, or
// there was no ExternalAction.
func printFingerprints(in io.Reader, name string, canonical bool, stdout, stderr io.Writer) int {
	res, readErr := manifest.Read(in)
	status := 0
	for _, xa := range res.Actions {
		fp, err := fingerprint.Compute(&xa.Spec)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "actionledger fingerprint: %s: ExternalAction/%s: %v\n", name, xa.Name, err)
			status = 1
			continue
		}
		_, _ = fmt.Fprintf(stdout, "%s %s\n", displayName(xa.Namespace, xa.Name), fp)
		if canonical {
			c, _ := fingerprint.Canonical(&xa.Spec)
			_, _ = fmt.Fprintln(stdout, string(c))
		}
	}
	for _, s := range res.Skipped {
		_, _ = fmt.Fprintf(stderr, "actionledger fingerprint: %s: skipped %s\n", name, s)
		if s.Err != nil {
			status = 1
		}
	}
	if readErr != nil {
		_, _ = fmt.Fprintf(stderr, "actionledger fingerprint: %s: %v\n", name, readErr)
		status = 1
	}
	if len(res.Actions) == 0 && readErr == nil && !res.Invalid() {
		_, _ = fmt.Fprintf(stderr, "actionledger fingerprint: %s holds no ExternalAction\n", name)
		status = 1
	}
	return status
}

// displayName is namespace/name, or name when the manifest leaves the namespace to kubectl.
func displayName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
