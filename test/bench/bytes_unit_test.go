package bench

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/ledger"
	"github.com/actionledger/actionledger/internal/retry"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// timestamps matches the RFC 3339 times of a status's JSON (second resolution, as metav1.Time marshals).
var timestamps = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"`)

// TestStatusShapesMatchLedger checks that the bytes part's lean shape is what the manager writes: the claim and
// the outcome of internal/ledger for an action that succeeds at its first attempt with the recording
// destination's answer, equal as JSON up to the times. And that the minimal shape is rawStatuses' minimal pair.
func TestStatusShapesMatchLedger(t *testing.T) {
	xa := envtestutil.Action("t1-ns", "a-1", "fast", "/x", `{"i":1}`)
	const holder = "bench-host_0123abcd"
	key := xa.Namespace + "/" + xa.Name
	now := time.Now()
	env := ledger.Env{Now: now, Holder: holder, Generation: 1, Retention: 24 * time.Hour,
		Policy: retry.Policy{MaxAttempts: 3, Deadline: now.Add(time.Hour)}}
	begun := ledger.Begin(&actionsv1alpha1.ExternalActionStatus{}, key, sha256Hex("fingerprint of "+key), env)
	step := ledger.Advance(begun, env)
	if step.Kind != ledger.KindSend {
		t.Fatalf("Advance: %+v, want a claim", step)
	}
	claim := step.Status
	want := shapeStatus(shapeResponse, xa, holder, true).Response
	out, ok := ledger.Record(claim, 1, ledger.Outcome{Class: retry.ClassSuccess, FinishedAt: now, StatusCode: 201, Response: want}, env)
	if !ok {
		t.Fatal("Record refused the outcome")
	}
	norm := func(st *actionsv1alpha1.ExternalActionStatus) string {
		return timestamps.ReplaceAllString(envtestutil.JSON(st), `"T"`)
	}
	if got, exp := norm(shapeStatus(shapeLean, xa, holder, false)), norm(claim); got != exp {
		t.Errorf("claim shape:\n got %s\nwant %s (ledger)", got, exp)
	}
	if got, exp := norm(shapeStatus(shapeLean, xa, holder, true)), norm(out.Status); got != exp {
		t.Errorf("outcome shape:\n got %s\nwant %s (ledger)", got, exp)
	}
	t.Logf("the manager's outcome status (%d B): %s", len(envtestutil.JSON(out.Status)), envtestutil.JSON(out.Status))

	t.Setenv("BENCH_RAW_STATUS", "")
	claimed, done := rawStatuses(nil)
	if got, exp := norm(shapeStatus(shapeMinimal, xa, holder, false)), norm(claimed(xa)); got != exp {
		t.Errorf("minimal claim %s, want rawStatuses' %s", got, exp)
	}
	if got, exp := norm(shapeStatus(shapeMinimal, xa, holder, true)), norm(done(xa)); got != exp {
		t.Errorf("minimal outcome %s, want rawStatuses' %s", got, exp)
	}

	// BENCH_RAW_STATUS=real: the lean shape (the ledger's, checked above), with this host's holder.
	t.Setenv("BENCH_RAW_STATUS", "real")
	claimed, done = rawStatuses(nil)
	host := claimed(xa).Claim.Holder
	if got, exp := norm(claimed(xa)), norm(shapeStatus(shapeLean, xa, host, false)); got != exp {
		t.Errorf("BENCH_RAW_STATUS=real claim %s, want the lean shape %s", got, exp)
	}
	if got, exp := norm(done(xa)), norm(shapeStatus(shapeLean, xa, host, true)); got != exp {
		t.Errorf("BENCH_RAW_STATUS=real outcome %s, want the lean shape %s", got, exp)
	}
	if host == "raw" || host == "" {
		t.Errorf("BENCH_RAW_STATUS=real claim holder %q, want the manager's <hostname>_<8 hex>", host)
	}
}

// TestBytesRowsCheck checks the harness check and the table of the bytes part (no control plane).
func TestBytesRowsCheck(t *testing.T) {
	xa := envtestutil.Action("t1-ns", "a-1", "fast", "/x", `{"i":1}`)
	rows := make([]BytesRow, len(statusShapes))
	for level := range statusShapes {
		b := len(envtestutil.JSON(shapeStatus(level, xa, "h_1", true)))
		rows[level] = BytesRow{Shape: statusShapes[level], Objects: 10, Runs: 1, OutcomeBytes: b, ObjectsPerSec: 100,
			StoredBytes: float64(1000 + b), ManagedFieldsBytes: 500 + level}
		switch {
		case level == shapeLean && b >= rows[level-1].OutcomeBytes:
			t.Errorf("shape %q removes no bytes from the outcome (%d B)", statusShapes[level], b)
		case level > 0 && level != shapeLean && b <= rows[level-1].OutcomeBytes:
			t.Errorf("shape %q adds no bytes to the outcome (%d B)", statusShapes[level], b)
		}
	}
	if err := checkBytesRows(rows); err != nil {
		t.Fatal(err)
	}
	bad := append([]BytesRow(nil), rows...)
	bad[3].StoredBytes = bad[2].StoredBytes
	if checkBytesRows(bad) == nil {
		t.Error("a row no larger than the one before passed the check")
	}
	bad = append([]BytesRow(nil), rows...)
	bad[shapeLean].StoredBytes = bad[shapeResponse].StoredBytes
	if checkBytesRows(bad) == nil {
		t.Error("a lean row no smaller than the manager's before passed the check")
	}
	bad = append([]BytesRow(nil), rows...)
	bad[5].ObjectsPerSec = 0
	if checkBytesRows(bad) == nil {
		t.Error("a row that measured no rate passed the check")
	}
	table := bytesTable(rows[:2])
	if !strings.Contains(table, "| minimal (raw baseline) | 10 | 1 | 0 | ") || strings.Count(table, "\n") != 4 {
		t.Errorf("table:\n%s", table)
	}
}

// TestBytesShapesChoosesLevels checks BENCH_BYTES_SHAPES: the levels asked for, sorted and once each, 0 (the
// minimal shape) included, out-of-range ones dropped; every level when unset or when none is valid.
func TestBytesShapesChoosesLevels(t *testing.T) {
	for _, c := range []struct {
		env  string
		want []int
	}{
		{"8,0", []int{0, shapeLean}},
		{"0, 3,3,99,-1,x", []int{0, 3}},
		{"", nil},
		{"99", nil},
	} {
		t.Setenv("BENCH_BYTES_SHAPES", c.env)
		got := bytesShapes()
		want := c.want
		if want == nil {
			for l := range statusShapes {
				want = append(want, l)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("BENCH_BYTES_SHAPES=%q: %v, want %v", c.env, got, want)
		}
	}
}
