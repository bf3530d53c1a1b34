package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// The status-bytes part (BENCH_PARTS=bytes, issue 24): what each field group of an ExternalAction's status
// costs the API server and etcd. On one control plane with no manager running, the raw baseline's bare client
// (rawWrites: create + claim status PUT + outcome status PUT per object, BENCH_CREATORS workers, the manager's
// client rate limit, the observer watch open) writes BENCH_BYTES_ACTIONS objects for each status shape of
// statusShapes, from the raw baseline's minimal status to the manager's own, adding one field group per row.
// Every shape runs BENCH_REPEAT times, interleaved (shape 1, 2, ..., then backwards), and its objects are deleted
// before the next run, so every run starts from the same store. Rows are medians.

// The shape levels; each adds one field group to the one before (shapeStatus).
const (
	shapeMinimal = iota
	shapeKeyed
	shapeReady
	shapeAllConditions
	shapeLongMessages
	shapeHistory
	shapeTimes
	shapeResponse
	shapeLean
)

// statusShapes names the levels, in order (the table's first column).
var statusShapes = []string{
	shapeMinimal:       "minimal (raw baseline)",
	shapeKeyed:         "+ key, fingerprint, observedGeneration",
	shapeReady:         "+ Ready condition",
	shapeAllConditions: "+ Reconciling, Stalled conditions",
	shapeLongMessages:  "+ long messages, real holder",
	shapeHistory:       "+ attemptHistory",
	shapeTimes:         "+ deadline, completedAt, expiresAt",
	shapeResponse:      "+ response headers, real body (the manager's before issue 24)",
	shapeLean:          "lean: the manager's now (Ready alone when finished, no first-attempt history)",
}

// benchEffectID is the effect id of the recording destination's answer in the real-sized response.
const benchEffectID = "eff_4c86e21d49ae"

// shapeStatus is the claim (outcome false) or the outcome status of xa at level, as the raw client writes it.
// Level shapeMinimal is rawStatuses' minimal pair; shapeResponse is what the manager wrote before issue 24 for
// an action that succeeds at its first attempt against the recording destination, and shapeLean what it writes
// now (internal/ledger: Begin, claim, Record; TestStatusShapesMatchLedger checks it): shapeResponse without
// the Reconciling and Stalled conditions that are not True and without the first attempt's history entry. holder is the claim's holder from shapeLongMessages on
// ("raw" before, as the minimal baseline).
func shapeStatus(level int, xa *actionsv1alpha1.ExternalAction, holder string, outcome bool) *actionsv1alpha1.ExternalActionStatus {
	if level == shapeLean {
		st := shapeStatus(shapeResponse, xa, holder, outcome)
		st.AttemptHistory = nil
		st.Conditions = slices.DeleteFunc(st.Conditions, func(c metav1.Condition) bool {
			return c.Type != actionsv1alpha1.ConditionReady && c.Status != metav1.ConditionTrue
		})
		return st
	}
	now := metav1.Now()
	if level < shapeLongMessages {
		holder = "raw"
	}
	st := &actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhaseInProgress, Attempts: 1}
	if outcome {
		st.Phase = actionsv1alpha1.PhaseSucceeded
		st.Response = &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: `{"id":"x"}`, BodySHA256: "sha256:0"}
	} else {
		st.Claim = &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: holder, StartedAt: now, ExpiresAt: now}
	}
	key := xa.Namespace + "/" + xa.Name
	if level >= shapeKeyed {
		st.IdempotencyKey, st.Fingerprint, st.ObservedGeneration = key, sha256Hex("fingerprint of "+key), 1
	}
	if level >= shapeReady {
		st.Conditions = shapeConditions(level, holder, outcome, now)
	}
	if outcome && level >= shapeHistory {
		st.AttemptHistory = []actionsv1alpha1.AttemptRecord{{Number: 1, StartedAt: now, FinishedAt: &now,
			Result: "Success", StatusCode: 201}}
	}
	if level >= shapeTimes {
		deadline := metav1.NewTime(now.Add(time.Hour))
		st.Deadline = &deadline
		if outcome {
			expires := metav1.NewTime(now.Add(24 * time.Hour))
			st.CompletedAt, st.ExpiresAt = &now, &expires
		}
	}
	if outcome && level >= shapeResponse {
		body := fmt.Sprintf(`{"id":%q,"key":%q,"path":"/x","method":"POST"}`, benchEffectID, key)
		st.Response = &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: body, BodySHA256: sha256Hex(body),
			Headers: map[string]string{"Content-Type": "application/json", "Location": "/effects/" + benchEffectID}}
	}
	return st
}

// shapeConditions are the conditions of level: Ready only, then Reconciling and Stalled with short messages,
// then the manager's messages (ledger.setPhase).
func shapeConditions(level int, holder string, outcome bool, now metav1.Time) []metav1.Condition {
	type cond struct {
		typ         string
		on          bool
		short, full string
	}
	reason := actionsv1alpha1.ReasonSucceeded
	cs := []cond{{actionsv1alpha1.ConditionReady, true, "succeeded", "attempt 1 succeeded with status 201"},
		{actionsv1alpha1.ConditionReconciling, false, "done", "finished"},
		{actionsv1alpha1.ConditionStalled, false, "done", "finished"}}
	if !outcome {
		reason = actionsv1alpha1.ReasonAttemptInProgress
		claimed := "attempt 1 claimed by " + holder
		cs = []cond{{actionsv1alpha1.ConditionReady, false, "claimed", claimed},
			{actionsv1alpha1.ConditionReconciling, true, "claimed", claimed},
			{actionsv1alpha1.ConditionStalled, false, "ok", "making progress"}}
	}
	if level < shapeAllConditions {
		cs = cs[:1]
	}
	out := make([]metav1.Condition, 0, len(cs))
	for _, c := range cs {
		s, msg := metav1.ConditionFalse, c.short
		if c.on {
			s = metav1.ConditionTrue
		}
		if level >= shapeLongMessages {
			msg = c.full
		}
		out = append(out, metav1.Condition{Type: c.typ, Status: s, ObservedGeneration: 1, LastTransitionTime: now,
			Reason: reason, Message: msg})
	}
	return out
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// BytesRun is one run of one status shape.
type BytesRun struct {
	ObjectsPerSec float64 `json:"objectsPerSecond"`
	Seconds       float64 `json:"seconds"`
	// CPUms is CPU milliseconds per object of the API server, etcd and the benchmark process (no manager).
	CPUms CPU `json:"cpuMsPerObject"`
	// Stored is what etcd held under the namespace's externalactions after the writes (keys must be the run's
	// object count).
	Stored Stored `json:"stored"`
	// ManagedFieldsBytes is len(JSON(metadata.managedFields)) of one stored object, as the API server returns it.
	ManagedFieldsBytes int    `json:"managedFieldsJSONBytes"`
	Load               string `json:"loadavg"`
}

// BytesRow is the median of the runs of one status shape (BENCH_PARTS=bytes).
type BytesRow struct {
	Shape   string `json:"shape"`
	Objects int    `json:"objects"`
	Runs    int    `json:"runs"`
	// ClaimBytes and OutcomeBytes are len(JSON(status)) of the claim as written and of the outcome as stored.
	ClaimBytes    int     `json:"claimStatusJSONBytes"`
	OutcomeBytes  int     `json:"outcomeStatusJSONBytes"`
	ObjectsPerSec float64 `json:"objectsPerSecond"`
	// RatioToMinimal is ObjectsPerSec over the minimal shape's (the first row's).
	RatioToMinimal float64 `json:"ratioToMinimal"`
	APIServerCPUms float64 `json:"apiserverCpuMsPerObject"`
	EtcdCPUms      float64 `json:"etcdCpuMsPerObject"`
	// StoredBytes is etcd's key + value bytes per object (the API server's JSON, managedFields included).
	StoredBytes        float64    `json:"storedBytesPerObject"`
	ManagedFieldsBytes int        `json:"managedFieldsJSONBytes"`
	Detail             []BytesRun `json:"runDetails"`
}

// statusBytesPart runs every shape repeat times, interleaved, on one fresh control plane with n objects per run
// and conc writers, and returns one row per shape.
func statusBytesPart(t *testing.T, n, conc, repeat int) []BytesRow {
	t.Helper()
	t0 := time.Now()
	e := newEnv(t)
	t.Logf("control plane ready in %s", time.Since(t0).Round(time.Millisecond))
	ns := e.Namespace(t)
	b := bytesEnv{e: e, c: rawClient(t, e), etcd: newEtcdClient(e.Env.ControlPlane.Etcd.URL.String()), ns: ns,
		prefix: fmt.Sprintf("/registry/%s/externalactions/%s/", actionsv1alpha1.GroupVersion.Group, ns),
		holder: app.NewHolder()} // what the manager writes in claims: <hostname>_<8 hex>
	shapes := bytesShapes()
	rows := make([]BytesRow, len(statusShapes))
	for i := 1; i <= repeat; i++ {
		for k := range shapes {
			// Every other repeat goes backwards, so that a drift within a pass (load, the store) does not always
			// land on the same rows.
			level := shapes[k]
			if i%2 == 0 {
				level = shapes[len(shapes)-1-k]
			}
			name := statusShapes[level]
			r, claimB, outB := b.run(t, level, n, conc)
			t.Logf("shape %d %q, run %d: %d objects, %.1f objects/s, CPU ms/object %v, status %d/%d B (claim/outcome), stored %.0f B/object, managedFields %d B, load %s",
				level, name, i, n, r.ObjectsPerSec, r.CPUms, claimB, outB, r.Stored.PerKey(), r.ManagedFieldsBytes, r.Load)
			if r.Stored.Keys != int64(n) {
				t.Fatalf("shape %q wrote %d objects, want %d", name, r.Stored.Keys, n)
			}
			rows[level].Shape, rows[level].Objects, rows[level].ClaimBytes, rows[level].OutcomeBytes = name, n, claimB, outB
			rows[level].Detail = append(rows[level].Detail, r)
		}
	}
	rows = slices.DeleteFunc(rows, func(r BytesRow) bool { return len(r.Detail) == 0 })
	for i := range rows {
		var rate, api, etcdCPU, stored, mf []float64
		for _, r := range rows[i].Detail {
			rate, api, etcdCPU = append(rate, r.ObjectsPerSec), append(api, r.CPUms.APIServer), append(etcdCPU, r.CPUms.Etcd)
			stored, mf = append(stored, r.Stored.PerKey()), append(mf, float64(r.ManagedFieldsBytes))
		}
		rows[i].Runs, rows[i].ObjectsPerSec, rows[i].APIServerCPUms, rows[i].EtcdCPUms = len(rate), median(rate), median(api), median(etcdCPU)
		rows[i].StoredBytes, rows[i].ManagedFieldsBytes = median(stored), int(median(mf))
		if rows[0].ObjectsPerSec > 0 {
			rows[i].RatioToMinimal = rows[i].ObjectsPerSec / rows[0].ObjectsPerSec
		}
	}
	return rows
}

// bytesShapes are the levels of statusShapes the bytes part writes: BENCH_BYTES_SHAPES (a comma-separated list
// of levels, 0 the minimal shape, shapeLean the manager's), all of them by default. The first row's rate is
// what "vs minimal" divides by.
func bytesShapes() []int {
	var out []int
	for f := range strings.SplitSeq(os.Getenv("BENCH_BYTES_SHAPES"), ",") {
		if l, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && l >= 0 && l < len(statusShapes) && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		for l := range statusShapes {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// bytesWritesClaim says whether the bytes part writes the claim status: BENCH_BYTES_WRITES=2 writes the
// claimless path's create and outcome only (the claim bytes column is then the claim it would have written).
func bytesWritesClaim() bool { return intEnv("BENCH_BYTES_WRITES", 3) != 2 }

// bytesEnv is the bytes part's control plane: its raw client, etcd, namespace (and its etcd prefix) and the
// claims' holder.
type bytesEnv struct {
	e          *envtestutil.Env
	c          client.Client
	etcd       *etcdClient
	ns, prefix string
	holder     string
}

// run writes n objects of one shape, measures them and deletes them. It returns the run and the JSON sizes of
// the claim (as written) and of the outcome (as stored).
func (b bytesEnv) run(t *testing.T, level, n, conc int) (BytesRun, int, int) {
	t.Helper()
	ctx := context.Background()
	e, c, ns, holder := b.e, b.c, b.ns, b.holder
	observer := watchSucceeded(t, e, ns)
	claimed := func(xa *actionsv1alpha1.ExternalAction) *actionsv1alpha1.ExternalActionStatus {
		return shapeStatus(level, xa, holder, false)
	}
	done := func(xa *actionsv1alpha1.ExternalAction) *actionsv1alpha1.ExternalActionStatus {
		return shapeStatus(level, xa, holder, true)
	}
	load := loadavg()
	meter := newCPUMeter(e, 0)
	cpu0 := meter.read()
	start := time.Now()
	writeClaim := claimed
	if !bytesWritesClaim() {
		writeClaim = nil
	}
	rawWrites(t, c, ns, "b", n, conc, writeClaim, done)
	secs := time.Since(start).Seconds()
	r := BytesRun{ObjectsPerSec: float64(n) / secs, Seconds: secs, CPUms: perActionCPU(cpu0, meter.read(), n)}
	observer.cancel()
	r.Load = load + " -> " + loadavg()

	var err error
	if r.Stored, err = b.etcd.stored(ctx, b.prefix); err != nil {
		t.Fatalf("reading etcd: %v", err)
	}
	var one actionsv1alpha1.ExternalAction
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "b-1"}, &one); err != nil {
		t.Fatal(err)
	}
	mf, _ := json.Marshal(one.ManagedFields)
	r.ManagedFieldsBytes = len(mf)
	claimB, outB := len(envtestutil.JSON(claimed(&one))), len(envtestutil.JSON(one.Status))
	removeActions(t, c, ns, conc)
	// Compact and defragment, as a real cluster does on its schedule, so that every shape starts from a store
	// without the history of the one before.
	if _, err := b.etcd.compactDefrag(ctx); err != nil {
		t.Fatalf("compacting etcd between shapes: %v", err)
	}
	return r, claimB, outB
}

// removeActions deletes every ExternalAction of ns, first stripping the finalizer the admission policy added
// (no manager runs to do it; stripped before the delete, each object costs two writes, not three), until none
// is left.
func removeActions(t *testing.T, c client.Client, ns string, conc int) {
	t.Helper()
	ctx := context.Background()
	strip := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	for deadline := time.Now().Add(5 * time.Minute); ; {
		var list actionsv1alpha1.ExternalActionList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d objects left in %s after deleting them", len(list.Items), ns)
		}
		err := forEach(len(list.Items), conc, func(i int) error {
			xa := &list.Items[i]
			if len(xa.Finalizers) == 0 {
				return nil
			}
			if err := c.Patch(ctx, xa, strip); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("removing the finalizer of %s: %w", xa.Name, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteAllOf(ctx, &actionsv1alpha1.ExternalAction{}, client.InNamespace(ns)); err != nil {
			t.Fatalf("deleting the shape's objects: %v", err)
		}
	}
}

// forEach runs f(0), ..., f(n-1) on conc workers; after the first error it hands out no more work and returns
// that error.
func forEach(n, conc int, f func(i int) error) error {
	var (
		mu    sync.Mutex
		next  int
		first error
		wg    sync.WaitGroup
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || next >= n {
			return 0, false
		}
		next++
		return next - 1, true
	}
	for range max(conc, 1) {
		wg.Go(func() {
			for i, ok := take(); ok; i, ok = take() {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

// checkBytesRows is the bytes part's harness check: every shape measured a rate and its objects, every row's
// status and stored bytes up to shapeResponse are above the row before (each row adds fields; managedFields
// never shrink), and the lean row's are below shapeResponse's (it removes fields).
func checkBytesRows(rows []BytesRow) error {
	for i, r := range rows {
		if r.Runs == 0 || r.ObjectsPerSec <= 0 || r.StoredBytes <= 0 || r.OutcomeBytes <= 0 {
			return fmt.Errorf("shape %q measured nothing: %+v", r.Shape, r)
		}
		if i == 0 || len(rows) != len(statusShapes) { // the order of sizes holds for the whole table (BENCH_BYTES_SHAPES)
			continue
		}
		p := rows[i-1]
		if i == shapeLean {
			if r.OutcomeBytes >= p.OutcomeBytes || r.StoredBytes >= p.StoredBytes {
				return fmt.Errorf("shape %q is not smaller than %q: outcome %d >= %d B or stored %.0f >= %.0f B",
					r.Shape, p.Shape, r.OutcomeBytes, p.OutcomeBytes, r.StoredBytes, p.StoredBytes)
			}
			continue
		}
		if r.OutcomeBytes <= p.OutcomeBytes || r.StoredBytes <= p.StoredBytes || r.ManagedFieldsBytes < p.ManagedFieldsBytes {
			return fmt.Errorf("shape %q is not larger than %q: outcome %d <= %d B, stored %.0f <= %.0f B or managedFields %d < %d B",
				r.Shape, p.Shape, r.OutcomeBytes, p.OutcomeBytes, r.StoredBytes, p.StoredBytes, r.ManagedFieldsBytes, p.ManagedFieldsBytes)
		}
	}
	return nil
}

// bytesTable renders the rows as a markdown table for docs/benchmarks.md.
func bytesTable(rows []BytesRow) string {
	var b strings.Builder
	b.WriteString("| status shape | objects | runs | claim status B | outcome status B | stored B/object | managedFields B | objects/s | vs minimal | API server CPU ms/object | etcd CPU ms/object |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.0f | %d | %.1f | %.2f | %.2f | %.2f |\n", r.Shape, r.Objects, r.Runs,
			r.ClaimBytes, r.OutcomeBytes, r.StoredBytes, r.ManagedFieldsBytes, r.ObjectsPerSec, r.RatioToMinimal,
			r.APIServerCPUms, r.EtcdCPUms)
	}
	return b.String()
}

// writeTableBeside writes table beside the JSON report (bin/bench/result.json -> bin/bench/result<suffix>.md),
// free of the test log's indentation, and returns its path.
func writeTableBeside(jsonPath, suffix, table string) (string, error) {
	p := strings.TrimSuffix(jsonPath, ".json") + suffix + ".md"
	if err := os.WriteFile(p, []byte(table), 0o600); err != nil { //nolint:gosec // BENCH_OUT is the user's own choice
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	return p, nil
}
