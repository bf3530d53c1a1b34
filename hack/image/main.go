// Command image builds a single-platform Linux container image from one static binary, with Go tooling only
// (no Docker, no daemon, no base image to pull), and writes it as an image tarball that `docker load`,
// `ctr images import` and `podman load` read.
//
// The image has two layers on an empty base:
//
//   - a base layer: /etc/passwd and /etc/group (root, and the user --user as "nonroot" with home
//     /home/nonroot), /tmp (1777), and the CA bundle /etc/ssl/certs/ca-certificates.crt (--ca-certs);
//   - the binary, at --path (mode 0755), the entrypoint unless --entrypoint says otherwise.
//
// There is no shell and no libc. Every file has uid/gid 0 (the user's home: the user) and the modification
// time --epoch (default $SOURCE_DATE_EPOCH, else 0); the image's created time is the same. The same inputs
// therefore give the same bytes, the same manifest digest and the same tarball.
//
// Usage:
//
//	go run . --binary ../../bin/image/actionledger --name localhost/actionledger:0.1.0 \
//	  --label org.opencontainers.image.version=0.1.0 --out ../../bin/image/actionledger-0.1.0.tar
//
// It prints the manifest digest, the config digest (the image ID), sizes, user, entrypoint and labels.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// The two tarball layouts --format names.
const (
	formatOCI    = "oci"
	formatDocker = "docker"
)

// options are the parsed command-line flags.
type options struct {
	binary, path, name, out, format, caCerts string
	entrypoint, cmd, labels                  []string
	uid                                      int
	epoch                                    int64
	arch                                     string
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		_, _ = fmt.Fprintf(stderr, "image: %v\n", err)
		return 2
	}
	sum, err := build(o)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "image: %v\n", err)
		return 1
	}
	sum.print(stdout)
	return 0
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var entrypoint, cmd, labels listFlag
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.binary, "binary", "", "The static binary to put into the image (required).")
	fs.StringVar(&o.path, "path", "/manager", "Where the binary goes in the image (an absolute path).")
	fs.Var(&entrypoint, "entrypoint", "One element of the entrypoint, repeatable (default: --path alone).")
	fs.Var(&cmd, "cmd", "One element of the default arguments (the image's Cmd), repeatable.")
	fs.StringVar(&o.name, "name", "", "The image reference, e.g. localhost/actionledger:0.1.0 (required; a "+
		"non-latest tag, and a registry part, since CRI reads a bare name as docker.io/library/<name>).")
	fs.Var(&labels, "label", "A config label key=value, repeatable.")
	fs.StringVar(&o.out, "out", "", "The tarball to write (required).")
	fs.StringVar(&o.format, "format", formatOCI, "oci: an OCI image layout in a tar (the manifest digest is "+
		"kept by ctr import and docker load); docker: the docker save layout (manifest.json).")
	fs.StringVar(&o.caCerts, "ca-certs", "mozilla", "The CA bundle at /etc/ssl/certs/ca-certificates.crt: "+
		"mozilla (the NSS roots of golang.org/x/crypto/x509roots/fallback, pinned in go.sum), none, "+
		"or the path of a PEM file.")
	fs.IntVar(&o.uid, "user", 65532, "The uid (and gid) the image runs as; it gets an /etc/passwd entry.")
	fs.Int64Var(&o.epoch, "epoch", envEpoch(), "Unix seconds used for every timestamp (default "+
		"$SOURCE_DATE_EPOCH, else 0).")
	fs.StringVar(&o.arch, "arch", runtime.GOARCH, "The image's architecture (GOARCH of the binary).")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.entrypoint, o.cmd, o.labels = entrypoint, cmd, labels
	if len(o.entrypoint) == 0 {
		o.entrypoint = []string{o.path}
	}
	return o, o.validate()
}

func (o options) validate() error {
	switch {
	case o.binary == "" || o.name == "" || o.out == "":
		return errors.New("--binary, --name and --out are required")
	case !strings.HasPrefix(o.path, "/") || strings.HasSuffix(o.path, "/"):
		return fmt.Errorf("--path %q: want an absolute file path", o.path)
	case o.format != formatOCI && o.format != formatDocker:
		return fmt.Errorf("--format %q: want oci or docker", o.format)
	case o.uid < 0 || o.uid > 1<<31-1:
		return fmt.Errorf("--user %d: want a uid from 0 to 2147483647", o.uid)
	case o.epoch < 0:
		return fmt.Errorf("--epoch %d: want seconds since 1970", o.epoch)
	}
	for _, l := range o.labels {
		if k, _, ok := strings.Cut(l, "="); !ok || k == "" {
			return fmt.Errorf("--label %q: want key=value", l)
		}
	}
	return nil
}

// envEpoch is $SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/), or 0.
func envEpoch() int64 {
	if v, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		return v
	}
	return 0
}
