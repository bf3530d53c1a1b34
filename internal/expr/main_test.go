package expr

import (
	"os"
	"testing"
)

// TestMain runs the package's tests with an evaluation CPU budget of 64 cores, which none of them reaches: they
// evaluate the worst admitted expressions back to back (under the race detector, seconds of CPU each), and
// measure the expressions, not the budget. The budget has tests of its own (cpubudget_test.go), on budgets of
// their own.
func TestMain(m *testing.M) {
	SetCores(64)
	os.Exit(m.Run())
}
