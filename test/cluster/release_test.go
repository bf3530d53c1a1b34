package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// testReleaseFromARegistry: make release's artifacts, pulled as users pull a released operator. A registry
// (hack/image/registry, go-containerregistry's, on 127.0.0.1) receives two releases of this tree, the chart versions
// 0.1.0 (the previous) and 0.1.1, each with the image, by hack/release.sh (make release REGISTRY=...); containerd
// reaches the registry over plain HTTP (hosts.toml in its config_path, hack/cluster/lib.sh). After the uninstall
// step, helm install oci://.../actionledger 0.1.0, whose values name the image by digest: the kubelet pulls it from
// the registry. Then, with 200 unsafe actions in flight, helm upgrade to 0.1.1: 0 duplicates, 0 lost.
func testReleaseFromARegistry(t *testing.T, p *product) {
	reg := p.startRegistry(t)
	hosts := filepath.Join(p.c.StateDir, "containerd", "certs.d", reg)
	if err := os.MkdirAll(hosts, 0o755); err != nil { //nolint:gosec // containerd reads it
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(hosts, "hosts.toml"), fmt.Sprintf("server = \"http://%s\"\n\n[host.\"http://%s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", reg, reg))
	env := []string{"IMAGE_TAR=" + os.Getenv("ACTIONLEDGER_IMAGE_TAR"), "HELM=" + filepath.Join(p.bin, "helm"), "REGISTRY=" + reg}
	var image string
	for _, v := range []string{"0.1.0", "0.1.1"} {
		began := time.Now()
		out, err := p.runErr(nil, append(env, "VERSION="+v, "RELEASE_DIR="+filepath.Join(p.dir, "release-"+v)),
			filepath.Join(p.bin, "..", "hack", "release.sh"))
		t.Logf("cluster: release %s pushed to %s in %.1fs:\n%s", v, reg, time.Since(began).Seconds(), out)
		if err != nil {
			t.Fatalf("hack/release.sh (make release REGISTRY=%s VERSION=%s): %v", reg, v, err)
		}
		for line := range strings.SplitSeq(out, "\n") {
			if rest, ok := strings.CutPrefix(line, "image "); ok {
				image = rest
			}
		}
	}
	repo, digest, ok := strings.Cut(image, "@")
	repo = strings.TrimSuffix(repo, ":0.1.1")
	if !ok || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("hack/release.sh printed no image with a digest: %q", image)
	}
	// The README's values and the suite's, less the image: the released chart names its own, by digest.
	suite, err := os.ReadFile(filepath.Join(p.dir, "suite-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for line := range strings.SplitSeq(string(suite), "\n") {
		if line == "  image:" || strings.HasPrefix(line, "    repository:") || strings.HasPrefix(line, "    tag:") {
			continue
		}
		kept = append(kept, line)
	}
	noImage := filepath.Join(p.dir, "suite-values-released.yaml")
	writeFile(t, noImage, strings.Join(kept, "\n"))
	helm := func(t *testing.T, verb, version string) {
		began := time.Now()
		out := p.helm(t, verb, releaseName, "oci://"+reg+"/charts/actionledger", "--version", version, "--plain-http",
			"--namespace", releaseNamespace, "-f", p.values, "-f", noImage, "--wait", "--timeout", "4m")
		t.Logf("cluster: helm %s oci://%s/charts/actionledger --version %s: %.1fs\n%s", verb, reg, version, time.Since(began).Seconds(), out)
	}

	helm(t, "install", "0.1.0")
	var pods []corev1.Pod
	poll(t, 2*time.Minute, "one chart manager pod, Ready", func(context.Context) (bool, error) {
		pods = p.pods(t, chartManagerSelector)
		return len(pods) == 1 && podReady(&pods[0]) && pods[0].DeletionTimestamp == nil, nil
	})
	pod := pods[0]
	want := repo + "@" + digest
	if got := pod.Spec.Containers[0].Image; got != want {
		t.Errorf("manager pod %s runs image %q, want %q (the release's digest)", pod.Name, got, want)
	}
	// The manager's and the gateway's pods run the same image: whichever starts first pulls it, the other finds it
	// present. The pull is the kubelet's Event of one of the release's pods.
	events := p.kubectl(t, "get", "events", "-n", releaseNamespace, "--field-selector", "reason=Pulled",
		"-o", "jsonpath={range .items[*]}{.involvedObject.name}: {.message}{\"\\n\"}{end}")
	t.Logf("cluster: release 0.1.0: manager pod %s image %s; the Pulled events of the release namespace:\n%s", pod.Name,
		pod.Spec.Containers[0].Image, events)
	if !strings.Contains(events, "Successfully pulled image \""+want+"\"") {
		t.Errorf("the kubelet did not pull %s from the registry (Pulled events of %s):\n%s", want, releaseNamespace, events)
	}
	if !strings.Contains(p.helm(t, "history", releaseName, "-n", releaseNamespace), "actionledger-0.1.0") {
		t.Error("helm history shows no revision of the chart actionledger-0.1.0")
	}

	unsafeRun(t, p, "helm upgrade 0.1.0 to 0.1.1", func(t *testing.T, ns string) {
		helm(t, "upgrade", "0.1.1")
	})
}

// startRegistry runs bin/registry on a free port of 127.0.0.1 until the test ends and returns its address.
func (p *product) startRegistry(t *testing.T) string {
	t.Helper()
	addrFile := filepath.Join(p.dir, "registry.addr")
	logf, err := os.Create(filepath.Join(p.dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, "registry"), "--addr", "127.0.0.1:0", "--addr-file", addrFile) //nolint:gosec // built by make test-cluster
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting bin/registry (make test-cluster builds it): %v", err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait(); _ = logf.Close() })
	var addr string
	poll(t, 30*time.Second, "the registry's address", func(context.Context) (bool, error) {
		b, err := os.ReadFile(addrFile)
		addr = strings.TrimSpace(string(b))
		return err == nil && addr != "", nil
	})
	return addr
}
