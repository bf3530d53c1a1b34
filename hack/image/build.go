package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Annotations of an OCI index entry: containerd (ctr images import, docker load) names the image by the
// first, and the OCI image layout spec has the tag in the second.
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// summary is what build made, for the log.
type summary struct {
	name, format, out  string
	digest, config     v1.Hash
	fileSize, layers   int64
	user               string
	entrypoint, labels []string
}

func (s summary) print(w io.Writer) {
	_, _ = fmt.Fprintf(w, "image:      %s (%s tarball %s, %d bytes)\n", s.name, s.format, s.out, s.fileSize)
	_, _ = fmt.Fprintf(w, "digest:     %s\n", s.digest)
	_, _ = fmt.Fprintf(w, "config:     %s\n", s.config)
	_, _ = fmt.Fprintf(w, "layers:     %d bytes compressed\n", s.layers)
	_, _ = fmt.Fprintf(w, "user:       %s\n", s.user)
	_, _ = fmt.Fprintf(w, "entrypoint: %q\n", s.entrypoint)
	for _, l := range s.labels {
		_, _ = fmt.Fprintf(w, "label:      %s\n", l)
	}
}

// build makes the image of o and writes it to o.out.
func build(o options) (summary, error) {
	tag, err := name.NewTag(o.name, name.StrictValidation)
	if err != nil {
		return summary{}, fmt.Errorf("--name %q: %w (want registry/repository:tag)", o.name, err)
	}
	img, err := image(o)
	if err != nil {
		return summary{}, err
	}
	if o.format == formatDocker {
		err = tarball.WriteToFile(o.out, tag, img)
	} else {
		err = writeOCIArchive(o.out, img, map[string]string{annotationContainerdName: o.name,
			annotationRefName: tag.TagStr()}, time.Unix(o.epoch, 0))
	}
	if err != nil {
		return summary{}, fmt.Errorf("write %s: %w", o.out, err)
	}
	return summarize(o, img)
}

// image is the image of o: the base layer and the binary layer on an empty base, with its config.
func image(o options) (v1.Image, error) {
	binary, err := os.ReadFile(o.binary)
	if err != nil {
		return nil, fmt.Errorf("--binary: %w", err)
	}
	ca, err := caBundle(o.caCerts)
	if err != nil {
		return nil, err
	}
	manifestType, configType, layerType := types.OCIManifestSchema1, types.OCIConfigJSON, types.OCILayer
	if o.format == formatDocker {
		manifestType, configType, layerType = types.DockerManifestSchema2, types.DockerConfigJSON, types.DockerLayer
	}
	epoch := time.Unix(o.epoch, 0).UTC()
	base, err := layer(baseEntries(o.uid, ca), epoch, layerType)
	if err != nil {
		return nil, err
	}
	app, err := layer(binaryEntries(o.path, binary), epoch, layerType)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for _, l := range o.labels {
		k, v, _ := strings.Cut(l, "=")
		labels[k] = v
	}
	img, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, manifestType), configType),
		&v1.ConfigFile{
			Architecture: o.arch, OS: "linux", Created: v1.Time{Time: epoch}, RootFS: v1.RootFS{Type: "layers"},
			Config: v1.Config{User: fmt.Sprintf("%d:%d", o.uid, o.uid), Entrypoint: o.entrypoint, Cmd: o.cmd,
				Labels: labels, WorkingDir: "/"},
		})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	created := v1.Time{Time: epoch}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "hack/image: /etc/passwd, " +
			"/etc/group, /tmp, CA bundle (" + o.caCerts + ")"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "hack/image: " + o.path}})
}

// writeOCIArchive writes img as an OCI image layout (index.json with annotations, oci-layout, blobs/) into
// a tar at out, its entries in lexical order with the modification time mtime.
func writeOCIArchive(out string, img v1.Image, annotations map[string]string, mtime time.Time) error {
	dir, err := os.MkdirTemp("", "image-layout-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.WriteImage(img); err != nil {
		return err
	}
	desc, err := descriptor(img)
	if err != nil {
		return err
	}
	desc.Annotations = annotations
	if err := p.AppendDescriptor(desc); err != nil {
		return err
	}
	f, err := os.Create(out) //nolint:gosec // the path is the operator's own --out
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = fs.WalkDir(os.DirFS(dir), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel == "." {
			return err
		}
		return tarFile(tw, dir, rel, d.IsDir(), mtime)
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// descriptor is img's index entry: media type, size, digest and platform (layout.AppendImage would also set
// artifactType, which the OCI spec reserves for artifacts).
func descriptor(img v1.Image) (v1.Descriptor, error) {
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Size: size, Digest: digest, Platform: cf.Platform()}, nil
}

// tarFile adds dir/rel to tw as rel (a directory: rel/), owned by root, modes 0755 and 0644.
func tarFile(tw *tar.Writer, dir, rel string, isDir bool, mtime time.Time) error {
	h := &tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}
	if isDir {
		return tw.WriteHeader(h)
	}
	b, err := os.ReadFile(filepath.Join(dir, rel)) //nolint:gosec // a file of our own temporary directory
	if err != nil {
		return err
	}
	h.Name, h.Typeflag, h.Mode, h.Size = rel, tar.TypeReg, 0o644, int64(len(b))
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = tw.Write(b)
	return err
}

func summarize(o options, img v1.Image) (summary, error) {
	s := summary{name: o.name, format: o.format, out: o.out}
	var err error
	if s.digest, err = img.Digest(); err != nil {
		return s, err
	}
	if s.config, err = img.ConfigName(); err != nil {
		return s, err
	}
	m, err := img.Manifest()
	if err != nil {
		return s, err
	}
	for _, l := range m.Layers {
		s.layers += l.Size
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return s, err
	}
	s.user, s.entrypoint = cf.Config.User, cf.Config.Entrypoint
	for k, v := range cf.Config.Labels {
		s.labels = append(s.labels, k+"="+v)
	}
	slices.Sort(s.labels)
	st, err := os.Stat(o.out)
	if err != nil {
		return s, err
	}
	s.fileSize = st.Size()
	return s, nil
}
