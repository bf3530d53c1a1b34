package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const testEpoch = 1700000000

// fakeBinary writes a file standing for the binary (the tool copies bytes; it does not run them).
func fakeBinary(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(p, []byte("\x7fELF not really a binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// buildImage runs the command with args and the standard ones, and returns the tarball's path and stdout.
func buildImage(t *testing.T, bin, format string, extra ...string) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.tar")
	args := append([]string{"--binary", bin, "--name", "localhost/app:1.2.3", "--out", out, "--format", format,
		"--epoch", "1700000000", "--label", "org.opencontainers.image.version=1.2.3"}, extra...)
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("run %q: exit %d: %s", args, code, stderr.String())
	}
	return out, stdout.String()
}

func fileHash(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// readOCI unpacks an OCI archive and returns its only image and that image's index annotations.
func readOCI(t *testing.T, archive string) (v1.Image, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != testEpoch || h.Uid != 0 {
			t.Errorf("archive entry %s: mtime %v uid %d, want %d and 0", h.Name, h.ModTime, h.Uid, testEpoch)
		}
		dst := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			err = os.MkdirAll(dst, 0o750)
		} else {
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(dst, b, 0o600)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("index: %v, %d manifests, want 1", err, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img, m.Manifests[0].Annotations
}

// files reads every layer of img: name -> header and content.
func files(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	hs, data := map[string]*tar.Header{}, map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			hs[h.Name], data[h.Name] = h, b
		}
		_ = rc.Close()
	}
	return hs, data
}

func TestImageContents(t *testing.T) {
	bin := fakeBinary(t)
	out, stdout := buildImage(t, bin, "oci")
	img, ann := readOCI(t, out)
	if ann[annotationContainerdName] != "localhost/app:1.2.3" || ann[annotationRefName] != "1.2.3" {
		t.Errorf("index annotations %v, want the full name for containerd and the tag", ann)
	}
	digest, err := img.Digest()
	if err != nil || !strings.Contains(stdout, "digest:     "+digest.String()) {
		t.Errorf("stdout %q does not print the manifest digest %v (%v)", stdout, digest, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/manager" ||
		c.Labels["org.opencontainers.image.version"] != "1.2.3" || cf.OS != "linux" || cf.Created.Unix() != testEpoch {
		t.Errorf("config %+v (os %s, created %v): want user 65532:65532, entrypoint /manager, the label, "+
			"linux, created at the epoch", c, cf.OS, cf.Created)
	}
	hs, data := files(t, img)
	want, _ := os.ReadFile(bin)
	if h := hs["manager"]; h == nil || h.Mode != 0o755 || !bytes.Equal(data["manager"], want) {
		t.Errorf("/manager: header %+v, want the binary with mode 0755", h)
	}
	if !strings.Contains(string(data["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd %q has no uid 65532", data["etc/passwd"])
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data["etc/ssl/certs/ca-certificates.crt"]) ||
		strings.Count(string(data["etc/ssl/certs/ca-certificates.crt"]), "BEGIN CERTIFICATE") < 100 {
		t.Errorf("the CA bundle does not hold Mozilla's roots (%d bytes)", len(data["etc/ssl/certs/ca-certificates.crt"]))
	}
	for name, h := range hs {
		wantUID := 0
		if name == "home/nonroot/" {
			wantUID = 65532
		}
		if h.ModTime.Unix() != testEpoch || h.Uid != wantUID || h.Gid != wantUID {
			t.Errorf("%s: mtime %v uid %d gid %d, want %d and %d", name, h.ModTime, h.Uid, h.Gid, testEpoch, wantUID)
		}
	}
	for _, shell := range []string{"bin/sh", "bin/", "usr/"} {
		if hs[shell] != nil {
			t.Errorf("the image has %s", shell)
		}
	}
}

func TestSameInputsSameBytes(t *testing.T) {
	bin := fakeBinary(t)
	for _, format := range []string{"oci", "docker"} {
		a, outA := buildImage(t, bin, format)
		b, outB := buildImage(t, bin, format)
		if fileHash(t, a) != fileHash(t, b) {
			t.Errorf("%s: two builds of the same inputs differ", format)
		}
		c, outC := buildImage(t, bin, format, "--epoch", "1700000001")
		if fileHash(t, a) == fileHash(t, c) {
			t.Errorf("%s: another epoch gave the same tarball", format)
		}
		digest := func(s string) string { _, d, _ := strings.Cut(s, "digest:"); return strings.Fields(d)[0] }
		if digest(outA) != digest(outB) || digest(outA) == digest(outC) {
			t.Errorf("%s: digests %s %s %s, want the first two equal and the third different", format,
				digest(outA), digest(outB), digest(outC))
		}
	}
}

func TestDockerFormat(t *testing.T) {
	bin := fakeBinary(t)
	out, _ := buildImage(t, bin, "docker", "--path", "/usr/bin/pause", "--user", "0", "--ca-certs", "none",
		"--cmd", "-v")
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "0:0" || cf.Config.Entrypoint[0] != "/usr/bin/pause" || cf.Config.Cmd[0] != "-v" {
		t.Errorf("config %+v: want user 0:0, entrypoint /usr/bin/pause, cmd -v", cf.Config)
	}
	hs, data := files(t, img)
	for _, name := range []string{"usr/", "usr/bin/", "usr/bin/pause", "tmp/"} {
		if hs[name] == nil {
			t.Errorf("no %s in the image", name)
		}
	}
	if hs["etc/ssl/certs/ca-certificates.crt"] != nil || strings.Contains(string(data["etc/passwd"]), "nonroot") {
		t.Errorf("--ca-certs none --user 0: want no CA bundle and no nonroot user; passwd %q", data["etc/passwd"])
	}
}

func TestRefusals(t *testing.T) {
	bin := fakeBinary(t)
	out := filepath.Join(t.TempDir(), "x.tar")
	cases := map[string][]string{
		"a name CRI reads as docker.io/library": {"--name", "controller:1.0"},
		"no tag":                                {"--name", "localhost/app"},
		"a bad label":                           {"--name", "localhost/app:1", "--label", "novalue"},
		"a relative path":                       {"--name", "localhost/app:1", "--path", "manager"},
		"an unknown format":                     {"--name", "localhost/app:1", "--format", "zip"},
		"a CA file without PEM":                 {"--name", "localhost/app:1", "--ca-certs", bin},
	}
	for name, extra := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append([]string{"--binary", bin, "--out", out}, extra...), &stdout, &stderr); code == 0 {
				t.Errorf("exit 0, want a refusal; stdout %q", stdout.String())
			}
			if !strings.HasPrefix(stderr.String(), "image: ") {
				t.Errorf("stderr %q, want the reason", stderr.String())
			}
		})
	}
}

// TestContainerdImports imports both formats into a containerd of its own (when containerd and ctr are
// installed and this runs as root) and checks the image's name, and for OCI that its digest is kept.
func TestContainerdImports(t *testing.T) {
	ctr := startContainerd(t)
	bin := fakeBinary(t)
	for _, format := range []string{"oci", "docker"} {
		out, stdout := buildImage(t, bin, format)
		got := ctr("images", "import", out)
		if !strings.Contains(got, "localhost/app:1.2.3") {
			t.Errorf("%s: ctr import said %q, want the image's name", format, got)
		}
		_, d, _ := strings.Cut(stdout, "digest:")
		if format == "oci" && !strings.Contains(got, strings.Fields(d)[0]) {
			t.Errorf("oci: ctr import said %q, want the digest %s", got, strings.Fields(d)[0])
		}
		ls := ctr("images", "ls", "name==localhost/app:1.2.3")
		if !strings.Contains(ls, "linux/"+runtime.GOARCH) {
			t.Errorf("%s: ctr images ls %q, want the image with its platform", format, ls)
		}
		ctr("images", "rm", "localhost/app:1.2.3")
	}
}
