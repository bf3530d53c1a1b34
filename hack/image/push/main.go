// Command push reads the image tarball `make image` writes (an OCI image layout in a tar, one image) and prints its
// manifest digest; with --ref it pushes the image there first (plain HTTP for a registry on a loopback address).
// `make release` uses it.
package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	tarPath := flag.String("tar", "", "the image tarball (an OCI image layout in a tar)")
	ref := flag.String("ref", "", "push to this reference (registry/repository:tag); empty: print the digest only")
	flag.Parse()
	if err := run(*tarPath, *ref); err != nil {
		log.Fatalf("push: %v", err)
	}
}

func run(tarPath, ref string) error {
	dir, err := os.MkdirTemp("", "push-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := untar(tarPath, dir); err != nil {
		return err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return fmt.Errorf("%s is not an OCI image layout (make image IMAGE_FORMAT=oci): %w", tarPath, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(m.Manifests) != 1 {
		return fmt.Errorf("%s holds %d manifests, want 1", tarPath, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	if ref != "" {
		var opts []name.Option
		host, _, _ := net.SplitHostPort(strings.SplitN(ref, "/", 2)[0])
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			opts = append(opts, name.Insecure)
		}
		r, err := name.ParseReference(ref, opts...)
		if err != nil {
			return err
		}
		if err := remote.Write(r, img); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
	}
	fmt.Println(digest.String())
	return nil
}

func untar(path, dir string) error {
	f, err := os.Open(path) //nolint:gosec // the tarball make image wrote
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o750); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
				return err
			}
			out, err := os.Create(target) //nolint:gosec // inside dir: the name is cleaned from the root
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil { //nolint:gosec // our own tarball
				_ = out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		}
	}
}
