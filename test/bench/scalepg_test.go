package bench

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// hasFlag reports whether the manager binary's -help lists flag (cached per flag and binary).
var helpOut sync.Map

func hasFlag(bin, flag string) bool {
	v, ok := helpOut.Load(bin)
	if !ok {
		out, _ := exec.CommandContext(context.Background(), bin, "-help").CombinedOutput() //nolint:gosec // our own build
		v, _ = helpOut.LoadOrStore(bin, string(out))
	}
	help := v.(string)
	return strings.Contains(help, "-"+flag+" ") || strings.Contains(help, "-"+flag+"\n")
}

// tombstoneStoreArgs returns the manager flags for store, and false (with a note) when this build cannot run
// it: the postgres store needs a manager with --tombstone-store and the test/pgtest helper.
func tombstoneStoreArgs(t *testing.T, bin, store, _ string) ([]string, bool) {
	t.Helper()
	if store == "objects" {
		return nil, true
	}
	if !hasFlag(bin, "tombstone-store") {
		t.Logf("note: the manager has no --tombstone-store flag; the %s store is not measured", store)
		return nil, false
	}
	t.Logf("note: this bench build has no PostgreSQL helper (test/pgtest); the %s store is not measured", store)
	return nil, false
}

// pgStats reads the PostgreSQL tombstone table's size.
type pgStats struct{}

func openPGStats(t *testing.T, _ []string) *pgStats {
	t.Helper()
	t.Fatal("no PostgreSQL helper in this build")
	return nil
}

func (*pgStats) read(*testing.T) (rows, bytes int64) { return 0, 0 }
