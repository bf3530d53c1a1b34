package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// startContainerd starts a containerd with its root, state and socket in a temporary directory, stops it when
// the test ends, and returns a function that runs ctr against it in the k8s.io namespace (the one the kubelet
// uses) and returns its output. It skips the test unless containerd and ctr are installed and this runs as root.
func startContainerd(t *testing.T) func(args ...string) string {
	t.Helper()
	for _, tool := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: apt-get install containerd)", tool)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	dir, err := os.MkdirTemp("", "ctr-") // short: the socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %[3]q
[ttrpc]
  address = "%[3]s.ttrpc"
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
		_ = os.RemoveAll(dir)
	})
	ctr := func(args ...string) (string, error) {
		out, err := exec.CommandContext(t.Context(), "ctr", append([]string{"--address", sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
		return string(out), err
	}
	// Wait for the socket to answer: up to 100 tries 100ms apart (containerd starts in well under a second).
	for i := 0; ; i++ {
		if _, err := ctr("version"); err == nil {
			break
		} else if i == 100 {
			b, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			t.Fatalf("containerd did not answer: %v\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return func(args ...string) string {
		t.Helper()
		out, err := ctr(args...)
		if err != nil {
			t.Fatalf("ctr %q: %v\n%s", args, err, out)
		}
		return out
	}
}
