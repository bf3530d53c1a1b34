package tombstones

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/actionledger/actionledger/test/envtestutil"
)

// config/samples/tombstone-postgres (config/default plus the tombstone-postgres component) renders a manager
// with --tombstone-store=postgres whose --tombstone-store-dsn-file is the mounted Secret's file; the gateway
// is left alone.
func TestPostgresComponentRenders(t *testing.T) {
	root := envtestutil.RepoRoot()
	bin := filepath.Join(root, "bin", "kustomize")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("bin/kustomize is not installed (run 'make kustomize'); skipping the render")
	}
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, "build", filepath.Join(root, "config", "samples", "tombstone-postgres"))
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kustomize build: %v\n%s", err, stderr.String())
	}
	deployments := map[string]*appsv1.Deployment{}
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if d.Kind == "Deployment" {
			deployments[d.Name] = &d
		}
	}
	mgr, gw := deployments["actionledger-controller-manager"], deployments["actionledger-gateway"]
	if mgr == nil || gw == nil {
		t.Fatalf("rendered Deployments %v, want the manager and the gateway", deployments)
	}
	c := mgr.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--tombstone-store=postgres") {
		t.Errorf("manager args %v lack --tombstone-store=postgres", c.Args)
	}
	file := ""
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--tombstone-store-dsn-file="); ok {
			file = v
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == "tombstone-store" && m.ReadOnly && filepath.Join(m.MountPath, "dsn") == file {
			mounted = true
		}
	}
	secret := false
	for _, v := range mgr.Spec.Template.Spec.Volumes {
		secret = secret || (v.Name == "tombstone-store" && v.Secret != nil && v.Secret.SecretName == "actionledger-tombstone-store")
	}
	if !mounted || !secret {
		t.Errorf("DSN file %q is not the read-only mount of Secret actionledger-tombstone-store: mounts %v, volumes %v",
			file, c.VolumeMounts, mgr.Spec.Template.Spec.Volumes)
	}
	for _, a := range gw.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--tombstone-store") {
			t.Errorf("the gateway got %s", a)
		}
	}
}
