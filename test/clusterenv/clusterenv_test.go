package clusterenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A missing prerequisite fails at once, before anything starts, naming the command that installs it.
func TestStartFailsWithTheInstallCommandWhenCNIPluginsAreMissing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	var out strings.Builder
	_, err := Start(context.Background(), Options{
		StateDir: dir,
		Env:      []string{"CNI_BIN_DIR=" + t.TempDir()}, // an empty plugin dir: no loopback plugin
		Output:   &out,
	})
	if err == nil {
		t.Fatal("Start succeeded without the CNI plugins")
	}
	const want = "apt-get install -y containerd runc containernetworking-plugins"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
	if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) {
		t.Errorf("state dir %s exists after the failed start (stat: %v)", dir, statErr)
	}
}

// A run without root fails at once, saying so.
func TestStartFailsWhenNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		_, err := Start(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Output: &strings.Builder{}})
		assertNotRootError(t, err)
		return
	}
	// As root: run up.sh as nobody (setpriv, util-linux), which must stop before creating anything.
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("running as root and setpriv is missing: cannot drop privileges to test the non-root message")
	}
	dir := filepath.Join(os.TempDir(), "alc-nonroot-test-does-not-exist")
	cmd := exec.CommandContext(t.Context(), setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		filepath.Join(RepoRoot(), "hack", "cluster", "up.sh"), dir)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("up.sh succeeded as uid 65534: %s", out)
	}
	if !strings.Contains(string(out), "must run as root") {
		t.Errorf("up.sh as uid 65534 said %q, want it to say it must run as root", out)
	}
	if _, statErr := os.Stat(dir); !os.IsNotExist(statErr) {
		t.Errorf("%s exists after the failed start (stat: %v)", dir, statErr)
	}
}

func assertNotRootError(t *testing.T, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "must run as root") {
		t.Errorf("Start as uid %d: error %v, want one saying it must run as root", os.Geteuid(), err)
	}
}
