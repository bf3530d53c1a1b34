package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// caBundlePath is where Go's crypto/x509 (and OpenSSL on Debian) looks first for the system roots on Linux.
const caBundlePath = "/etc/ssl/certs/ca-certificates.crt"

// entry is one file or directory of a layer; names are relative ("etc/passwd").
type entry struct {
	name string
	dir  bool
	mode int64
	uid  int
	data []byte
}

// baseEntries are the files every image gets: the users, /tmp and the CA bundle (nil: none).
func baseEntries(uid int, caPEM []byte) []entry {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" //nolint:gosec // an /etc/passwd line, no credential
	group := "root:x:0:\n"
	if uid != 0 {
		passwd += fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)
		group += fmt.Sprintf("nonroot:x:%d:\n", uid)
	}
	es := []entry{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
	}
	if caPEM != nil {
		es = append(es,
			entry{name: "etc/ssl/", dir: true, mode: 0o755},
			entry{name: "etc/ssl/certs/", dir: true, mode: 0o755},
			entry{name: strings.TrimPrefix(caBundlePath, "/"), mode: 0o644, data: caPEM})
	}
	if uid != 0 {
		es = append(es, entry{name: "home/", dir: true, mode: 0o755},
			entry{name: "home/nonroot/", dir: true, mode: 0o700, uid: uid})
	}
	return append(es, entry{name: "root/", dir: true, mode: 0o700}, entry{name: "tmp/", dir: true, mode: 0o1777})
}

// binaryEntries are the directories above p and the binary itself at p (absolute).
func binaryEntries(p string, binary []byte) []entry {
	var es []entry
	for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
		es = append([]entry{{name: strings.TrimPrefix(dir, "/") + "/", dir: true, mode: 0o755}}, es...)
	}
	return append(es, entry{name: strings.TrimPrefix(p, "/"), mode: 0o755, data: binary})
}

// layer is a gzip-compressed layer of media type mt holding es in order, every mtime at epoch.
func layer(es []entry, epoch time.Time, mt types.MediaType) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: epoch, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(mt))
}

// caBundle is the PEM bundle that --ca-certs names: "mozilla", "none" (nil) or a PEM file.
func caBundle(spec string) ([]byte, error) {
	switch spec {
	case "none":
		return nil, nil
	case "mozilla":
		return mozillaRoots()
	}
	b, err := os.ReadFile(spec) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, fmt.Errorf("--ca-certs: %w", err)
	}
	if blk, _ := pem.Decode(b); blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("--ca-certs %s: no PEM certificate at its start", spec)
	}
	return b, nil
}

// mozillaRoots are the roots of Mozilla's NSS trust store that golang.org/x/crypto/x509roots/fallback ships
// (its version is pinned in go.sum, so the bundle changes only when the module is updated), as PEM with a
// "# subject" line before each. A root that NSS trusts only with a constraint X.509 cannot express (a
// distrust-after date) is left out: a PEM file would trust it without the constraint.
func mozillaRoots() ([]byte, error) {
	var buf bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		c, err := x509.ParseCertificate(r.Certificate)
		if err != nil {
			return nil, fmt.Errorf("parse a fallback root: %w", err)
		}
		_, _ = fmt.Fprintf(&buf, "# %s\n", c.Subject)
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, fmt.Errorf("encode a root: %w", err)
		}
	}
	if buf.Len() == 0 {
		return nil, errors.New("the fallback bundle holds no unconstrained root")
	}
	return buf.Bytes(), nil
}
