package app

import (
	"os"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// On the node's network (hostNetwork: true) the host name is the node's, the same for every replica there: the
// claim holder names the pod from $POD_NAME (the chart's downward API), and is new for every process start.
func TestNewHolderNamesThePod(t *testing.T) {
	t.Setenv(PodNameEnv, "actionledger-controller-manager-7b4fc7b7d-fpwts")
	a, b := NewHolder(), NewHolder()
	if !strings.HasPrefix(a, "actionledger-controller-manager-7b4fc7b7d-fpwts_") || a == b {
		t.Errorf("NewHolder() = %q, %q: want the pod's name, then _ and a nonce new for each call", a, b)
	}
	t.Setenv(PodNameEnv, "")
	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name: %v", err)
	}
	if got := NewHolder(); !strings.HasPrefix(got, host+"_") {
		t.Errorf("without %s: NewHolder() = %q, want the host name %q first", PodNameEnv, got, host)
	}
}

// The leader Lease names the pod too: with $POD_NAME the manager builds its own Lease lock whose holder identity is
// the pod's name, then _ and a UUID (controller-runtime's would name the host, the node on its network); without
// it, or without leader election, controller-runtime's lock stays.
func TestLeaderLockNamesThePod(t *testing.T) {
	dir := t.TempDir()
	nsFile := dir + "/namespace"
	if err := os.WriteFile(nsFile, []byte("actionledger-system\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := inClusterNamespaceFile
	inClusterNamespaceFile = nsFile
	t.Cleanup(func() { inClusterNamespaceFile = old })
	cfg := &rest.Config{Host: "https://127.0.0.1:6443"}

	t.Setenv(PodNameEnv, "actionledger-controller-manager-7b4fc7b7d-fpwts")
	lock, err := leaderLock(cfg, Options{LeaderElection: true}, DefaultLeaderElectionID)
	if err != nil || lock == nil {
		t.Fatalf("leaderLock = %v, %v; want a lock", lock, err)
	}
	if id := lock.Identity(); !strings.HasPrefix(id, "actionledger-controller-manager-7b4fc7b7d-fpwts_") {
		t.Errorf("Identity() = %q, want the pod's name first", id)
	}
	if d := lock.Describe(); d != "actionledger-system/"+DefaultLeaderElectionID {
		t.Errorf("Describe() = %q, want the Lease in the pod's namespace", d)
	}
	if lock, err := leaderLock(cfg, Options{}, DefaultLeaderElectionID); lock != nil || err != nil {
		t.Errorf("without leader election: %v, %v; want nil", lock, err)
	}
	t.Setenv(PodNameEnv, "")
	if lock, err := leaderLock(cfg, Options{LeaderElection: true}, DefaultLeaderElectionID); lock != nil || err != nil {
		t.Errorf("without %s: %v, %v; want nil (controller-runtime's lock)", PodNameEnv, lock, err)
	}
}
