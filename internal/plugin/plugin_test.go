//go:build !unit

package plugin_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/fingerprint"
	"github.com/actionledger/actionledger/internal/plugin"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// These tests run the plugin's commands against a real kube-apiserver with real objects. No manager runs:
// each test writes the status the controller would have written, through the status subresource, so that every
// phase can be shown without waiting for it.
var env *envtestutil.Env

func TestMain(m *testing.M) { envtestutil.Main(m, &env) }

func newPlugin(t *testing.T, ns string) (*plugin.Plugin, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	s, err := plugin.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	return &plugin.Plugin{Client: c, Namespace: ns, Out: &out, ErrOut: &errOut, Now: func() time.Time { return now }}, &out, &errOut
}

func tsp(d time.Duration) *metav1.Time {
	t := ts(d)
	return &t
}

// createAction creates the action and writes status through the status subresource.
func createAction(t *testing.T, xa *actionsv1alpha1.ExternalAction, status func(*actionsv1alpha1.ExternalActionStatus)) *actionsv1alpha1.ExternalAction {
	t.Helper()
	env.Create(t, xa)
	if status != nil {
		status(&xa.Status)
		if xa.Status.IdempotencyKey == "" {
			xa.Status.IdempotencyKey = xa.Namespace + "/" + xa.Name
		}
		if err := env.Client.Status().Update(context.Background(), xa); err != nil {
			t.Fatalf("writing status of %s: %v", xa.Name, err)
		}
	}
	return xa
}

// "why" says the state in words and the next step for every phase a person meets.
func TestWhy(t *testing.T) {
	ns := env.Namespace(t)
	env.CreateDestination(t, ns, "broken", "http://127.0.0.1:9", nil)
	broken := &actionsv1alpha1.Destination{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "broken"}, broken); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&broken.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
		Reason: "SecretNotFound", Message: "secret token not found", LastTransitionTime: ts(-time.Hour)})
	if err := env.Client.Status().Update(context.Background(), broken); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dest string
		status     func(*actionsv1alpha1.ExternalActionStatus)
		want       []string
	}{{
		name: "unknown", dest: "demo",
		status: func(st *actionsv1alpha1.ExternalActionStatus) {
			st.Attempts = 1
			st.LastError = "Uncertain: Timeout: the request was sent and no answer came within 1s"
			withPhase(st, actionsv1alpha1.PhaseOutcomeUnknown, actionsv1alpha1.ReasonOutcomeUnknown, "attempt 1 may have been applied")
		},
		want: []string{"is OutcomeUnknown.", "Attempt 1 may or may not have been applied", "Look up the key " + "%NS%/unknown",
			"kubectl actionledger resolve unknown applied --reason", "kubectl actionledger resolve unknown not-applied --reason",
			"kubectl actionledger resolve unknown retry --reason", "Last error: Uncertain: Timeout"},
	}, {
		name: "exhausted", dest: "demo",
		status: func(st *actionsv1alpha1.ExternalActionStatus) {
			st.Attempts, st.LastError = 3, "NotSent: Dial: connection refused"
			st.CompletedAt, st.ExpiresAt = tsp(-time.Minute), tsp(24*time.Hour-time.Minute)
			withPhase(st, actionsv1alpha1.PhaseExhausted, actionsv1alpha1.ReasonAttemptsExhausted, "3 of 3 attempts made")
		},
		want: []string{"is Exhausted (AttemptsExhausted).", "It stopped after 3 attempt(s)", "kubectl actionledger resolve exhausted retry --reason",
			"collected at 2026-12-02T09:59:00Z (in 23h59m0s)"},
	}, {
		name: "conflict", dest: "demo",
		status: func(st *actionsv1alpha1.ExternalActionStatus) {
			st.LastError = "the key is bound to fingerprint sha256:aaa by the tombstone of an earlier object"
			withPhase(st, actionsv1alpha1.PhaseConflict, actionsv1alpha1.ReasonFingerprintConflict, "fingerprint conflict")
		},
		want: []string{"is Conflict (FingerprintConflict).", "already bound to another request", "Use a new name for a new action."},
	}, {
		name: "nodest", dest: "missing",
		status: func(st *actionsv1alpha1.ExternalActionStatus) {
			withPhase(st, actionsv1alpha1.PhasePending, actionsv1alpha1.ReasonDestinationNotReady, `Destination "missing" not found`)
		},
		want: []string{"is Pending (DestinationNotReady).", "Nothing is sent while its destination cannot be used.",
			"The Destination missing in namespace %NS% does not exist."},
	}, {
		name: "notready", dest: "broken",
		status: func(st *actionsv1alpha1.ExternalActionStatus) {
			withPhase(st, actionsv1alpha1.PhasePending, actionsv1alpha1.ReasonDestinationNotReady, "destination broken is not Ready")
		},
		want: []string{"The Destination broken in namespace %NS% is not Ready (SecretNotFound): secret token not found.",
			"kubectl describe destination broken", "resumes by itself"},
	}, {
		name: "retrying", dest: "demo",
		status: func(st *actionsv1alpha1.ExternalActionStatus) {
			st.Attempts, st.LastError = 1, "Retryable: 503"
			st.NextAttemptAt, st.Deadline = tsp(12*time.Second), tsp(time.Hour)
			withPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonRetryScheduled, "attempt 1 answered 503")
		},
		want: []string{"is InProgress (RetryScheduled).", "Last error: Retryable: 503.", "The next attempt (2) is due at 2026-12-01T10:00:12Z (in 12s)"},
	}, {
		name: "open", dest: "demo",
		status: func(st *actionsv1alpha1.ExternalActionStatus) {
			st.Attempts = 1
			st.Claim = &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "mgr-1", StartedAt: ts(-time.Second), ExpiresAt: ts(34 * time.Second)}
			withPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonAttemptInProgress, "attempt 1 sent")
		},
		want: []string{"Attempt 1 was sent at 2026-12-01T09:59:59Z by mgr-1", "claim expires at 2026-12-01T10:00:34Z (in 34s)", "Nothing to do: wait."},
	}, {
		name: "ok", dest: "demo",
		status: func(st *actionsv1alpha1.ExternalActionStatus) {
			st.Attempts, st.Response = 1, &actionsv1alpha1.ResponseRecord{StatusCode: 201}
			st.CompletedAt, st.ExpiresAt = tsp(-time.Minute), tsp(time.Hour)
			withPhase(st, actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.ReasonSucceeded, "attempt 1 succeeded with status 201")
		},
		want: []string{"is Succeeded.", "The destination answered 201 after 1 attempt(s).", "Nothing to do."},
	}, {
		name: "fresh", dest: "demo",
		want: []string{"is Pending.", "The controller has not recorded anything yet: check that the actionledger manager is running"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			createAction(t, envtestutil.Action(ns, tc.name, tc.dest, "/x", `{"a":1}`), tc.status)
			p, out, _ := newPlugin(t, ns)
			if err := p.Why(context.Background(), tc.name); err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				tc.want[i] = strings.ReplaceAll(tc.want[i], "%NS%", ns)
			}
			mustContain(t, tc.name, out.String(), tc.want...)
			if tc.name != "unknown" && tc.name != "exhausted" && strings.Contains(out.String(), "resolve") {
				t.Errorf("%s: a phase that takes no decision mentions resolve:\n%s", tc.name, out)
			}
		})
	}

	// A gone action: the tombstone is explained; a free name says so.
	createTombstone(t, ns, "gone", "sha256:abc", actionsv1alpha1.PhaseSucceeded, 201, 30*24*time.Hour)
	p, out, _ := newPlugin(t, ns)
	if err := p.Why(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "gone", out.String(), "is gone; its tombstone keeps the key "+ns+"/gone bound until 2026-12-31T10:00:00Z",
		"It ended Succeeded, status 201, with fingerprint sha256:abc.", "replays that outcome without a send")
	if err := p.Why(context.Background(), "never"); err == nil || !strings.Contains(err.Error(), "the name is free") {
		t.Errorf("why on a free name: %v", err)
	}
}

func createTombstone(t *testing.T, ns, name, fp string, phase actionsv1alpha1.Phase, code int32, ttl time.Duration) {
	t.Helper()
	env.Create(t, &actionsv1alpha1.ActionTombstone{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: actionsv1alpha1.ActionTombstoneSpec{Key: ns + "/" + name, Fingerprint: fp, Phase: phase, StatusCode: code,
			UID: "0d2c3d6e-uid", CompletedAt: tsp(-time.Hour), ExpiresAt: ts(ttl)},
	})
}

// "history" prints one row per recorded attempt and the open claim.
func TestHistory(t *testing.T) {
	ns := env.Namespace(t)
	createAction(t, envtestutil.Action(ns, "h", "demo", "/x", ""), func(st *actionsv1alpha1.ExternalActionStatus) {
		st.Attempts = 3
		st.AttemptHistory = []actionsv1alpha1.AttemptRecord{
			{Number: 1, StartedAt: ts(-3 * time.Minute), FinishedAt: tsp(-3*time.Minute + time.Second), Result: "Retryable", StatusCode: 503, RetryAfter: "120",
				TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"},
			{Number: 2, StartedAt: ts(-time.Minute), FinishedAt: tsp(-time.Minute + time.Second), Result: "NotSent", ErrorClass: "Dial"},
		}
		st.Claim = &actionsv1alpha1.AttemptClaim{Attempt: 3, Holder: "m", StartedAt: ts(-time.Second), ExpiresAt: ts(30 * time.Second)}
		withPhase(st, actionsv1alpha1.PhaseInProgress, actionsv1alpha1.ReasonAttemptInProgress, "attempt 3 sent")
	})
	p, out, _ := newPlugin(t, ns)
	if err := p.History(context.Background(), "h"); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := [][]string{
		{"ATTEMPT", "STARTED", "FINISHED", "RESULT", "CODE/ERROR", "RETRY-AFTER", "TRACE"},
		{"1", "2026-12-01T09:57:00Z", "2026-12-01T09:57:01Z", "Retryable", "503", "120", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"2", "2026-12-01T09:59:00Z", "2026-12-01T09:59:01Z", "NotSent", "Dial", "-", "-"},
		{"3", "2026-12-01T09:59:59Z", "-", "open", "(claim", "expires", "2026-12-01T10:00:30Z)", "-", "-", "-"},
	}
	if len(got) != len(want) {
		t.Fatalf("history has %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		if f := strings.Fields(got[i]); strings.Join(f, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d: %q, want fields %q", i, got[i], want[i])
		}
	}
	// The lean happy path: a first attempt that succeeded has no history entry; it is printed from the status.
	createAction(t, envtestutil.Action(ns, "lean", "demo", "/x", ""), func(st *actionsv1alpha1.ExternalActionStatus) {
		st.Attempts, st.CompletedAt = 1, tsp(-time.Minute)
		st.Response = &actionsv1alpha1.ResponseRecord{StatusCode: 201, BodySHA256: "sha256:00"}
		withPhase(st, actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.ReasonSucceeded, "succeeded")
	})
	out.Reset()
	if err := p.History(context.Background(), "lean"); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 ||
		strings.Join(strings.Fields(lines[1]), " ") != "1 - 2026-12-01T09:59:00Z Success 201 - -" {
		t.Errorf("history of a first attempt's success:\n%s", out)
	}
	createAction(t, envtestutil.Action(ns, "new", "demo", "/x", ""), nil)
	out.Reset()
	if err := p.History(context.Background(), "new"); err != nil || !strings.Contains(out.String(), "No attempts yet (phase Pending).") {
		t.Errorf("history of a new action: %v, %q", err, out)
	}
}

// "resolve" sets the two annotations on OutcomeUnknown and Exhausted actions and refuses every other phase
// without touching the object.
func TestResolve(t *testing.T) {
	ns := env.Namespace(t)
	for name, phase := range map[string]actionsv1alpha1.Phase{"unknown": actionsv1alpha1.PhaseOutcomeUnknown,
		"exhausted": actionsv1alpha1.PhaseExhausted, "done": actionsv1alpha1.PhaseSucceeded, "busy": actionsv1alpha1.PhaseInProgress} {
		createAction(t, envtestutil.Action(ns, name, "demo", "/x", ""), func(st *actionsv1alpha1.ExternalActionStatus) {
			withPhase(st, phase, string(phase), "set by the test")
		})
	}
	p, out, _ := newPlugin(t, ns)
	ctx := context.Background()
	if err := p.Resolve(ctx, "unknown", "applied", "ledger entry 7781 shows the charge"); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "resolve", out.String(), `externalaction/unknown: decision "applied" set (was OutcomeUnknown)`)
	if err := p.Resolve(ctx, "exhausted", "retry", ""); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]map[string]string{
		"unknown":   {actionsv1alpha1.AnnotationResolve: "applied", actionsv1alpha1.AnnotationResolveReason: "ledger entry 7781 shows the charge"},
		"exhausted": {actionsv1alpha1.AnnotationResolve: "retry"},
	} {
		got := env.Get(t, ns, name).Annotations
		if len(got) != len(want) || got[actionsv1alpha1.AnnotationResolve] != want[actionsv1alpha1.AnnotationResolve] ||
			got[actionsv1alpha1.AnnotationResolveReason] != want[actionsv1alpha1.AnnotationResolveReason] {
			t.Errorf("%s: annotations %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"done", "busy"} {
		before := env.Get(t, ns, name).ResourceVersion
		err := p.Resolve(ctx, name, "retry", "x")
		if !errors.Is(err, plugin.ErrRefused) || !strings.Contains(err.Error(), "only OutcomeUnknown and Exhausted actions take a decision") {
			t.Errorf("%s: resolve returned %v, want a refusal naming the phases", name, err)
		}
		if after := env.Get(t, ns, name); after.ResourceVersion != before || len(after.Annotations) != 0 {
			t.Errorf("%s: a refused resolve changed the object (annotations %v)", name, after.Annotations)
		}
	}
	if err := p.Resolve(ctx, "unknown", "maybe", ""); err == nil || !strings.Contains(err.Error(), `unknown decision "maybe"`) {
		t.Errorf("unknown decision: %v", err)
	}
}

// "tombstones" lists one namespace, or all with -A.
func TestTombstones(t *testing.T) {
	ns1, ns2 := env.Namespace(t), env.Namespace(t)
	createTombstone(t, ns1, "inv-1", "sha256:111", actionsv1alpha1.PhaseSucceeded, 201, time.Hour)
	createTombstone(t, ns1, "inv-2", "sha256:222", actionsv1alpha1.PhaseExhausted, 0, 2*time.Hour)
	createTombstone(t, ns2, "inv-3", "sha256:333", actionsv1alpha1.PhaseFailed, 422, 3*time.Hour)
	p, out, _ := newPlugin(t, ns1)
	if err := p.Tombstones(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(rows) != 3 || strings.Join(strings.Fields(rows[0]), " ") != "KEY FINGERPRINT PHASE CODE EXPIRES" {
		t.Fatalf("tombstones -n %s:\n%s", ns1, out)
	}
	mustContain(t, "-n", out.String(), ns1+"/inv-1", "sha256:111", "Succeeded", "201", "2026-12-01T11:00:00Z (in 1h0m0s)", ns1+"/inv-2", "Exhausted")
	if strings.Contains(out.String(), "inv-3") {
		t.Errorf("-n %s lists another namespace's tombstone:\n%s", ns1, out)
	}
	out.Reset()
	if err := p.Tombstones(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "-A", out.String(), ns1+"/inv-1", ns1+"/inv-2", ns2+"/inv-3", "422")
	empty, out2, _ := newPlugin(t, env.Namespace(t))
	if err := empty.Tombstones(context.Background(), false); err != nil || !strings.HasPrefix(out2.String(), "No tombstones in namespace ") {
		t.Errorf("empty namespace: %v %q", err, out2)
	}
}

// "check" tells, for each action of a manifest, send / replay / exists / conflict, and creates nothing.
func TestCheck(t *testing.T) {
	ns := env.Namespace(t)
	env.CreateDestination(t, ns, "demo", "http://127.0.0.1:9", nil)
	fpOf := func(path string) string {
		fp, err := fingerprint.Compute(&envtestutil.Action(ns, "x", "demo", path, `{"a":1}`).Spec)
		if err != nil {
			t.Fatal(err)
		}
		return fp
	}
	// live, same spec as the manifest; live with another spec; tombstones with the same and another
	// fingerprint; an expired tombstone with another fingerprint; a tombstone of an unfinished object.
	createAction(t, envtestutil.Action(ns, "live-same", "demo", "/a", `{"a":1}`), func(st *actionsv1alpha1.ExternalActionStatus) {
		st.Fingerprint = fpOf("/a")
		withPhase(st, actionsv1alpha1.PhaseSucceeded, actionsv1alpha1.ReasonSucceeded, "ok")
	})
	createAction(t, envtestutil.Action(ns, "live-other", "demo", "/other", `{"a":1}`), nil)
	createTombstone(t, ns, "ts-same", fpOf("/a"), actionsv1alpha1.PhaseSucceeded, 201, time.Hour)
	createTombstone(t, ns, "ts-other", fpOf("/other"), actionsv1alpha1.PhaseFailed, 422, time.Hour)
	createTombstone(t, ns, "ts-expired", fpOf("/other"), actionsv1alpha1.PhaseSucceeded, 201, -time.Minute)
	createTombstone(t, ns, "ts-unfinished", fpOf("/a"), actionsv1alpha1.PhaseInProgress, 0, time.Hour)
	var m strings.Builder
	for _, name := range []string{"live-same", "live-other", "ts-same", "ts-other", "ts-expired", "ts-unfinished", "brand-new"} {
		m.WriteString("---\napiVersion: actions.actionledger.dev/v1alpha1\nkind: ExternalAction\nmetadata: {name: " + name +
			"}\nspec: {destinationRef: {name: demo}, request: {path: /a, body: {a: 1}}}\n")
	}
	m.WriteString("---\napiVersion: actions.actionledger.dev/v1alpha1\nkind: ExternalAction\nmetadata: {name: elsewhere}\n" +
		"spec: {destinationRef: {name: nowhere}, request: {path: /a}}\n")
	m.WriteString("---\napiVersion: actions.actionledger.dev/v1alpha1\nkind: Destination\nmetadata: {name: demo}\nspec: {url: 'http://127.0.0.1:9'}\n")
	before := &actionsv1alpha1.ExternalActionList{}
	if err := env.Client.List(context.Background(), before, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}

	p, out, errOut := newPlugin(t, ns)
	err := p.Check(context.Background(), strings.NewReader(m.String()), "m.yaml")
	if !errors.Is(err, plugin.ErrRefused) {
		t.Errorf("check with conflicts returned %v, want ErrRefused", err)
	}
	want := map[string][]string{
		"live-same":     {"exists", "already there (Succeeded); applying it again sends nothing"},
		"live-other":    {"conflict", "the live object (Pending) has fingerprint " + fpOf("/other")[:19], "use a new name"},
		"ts-same":       {"replay", "a tombstone holds its outcome (Succeeded, status 201) until 2026-12-01T11:00:00Z"},
		"ts-other":      {"conflict", "the tombstone of an earlier object (Failed) binds the key to fingerprint " + fpOf("/other")[:19]},
		"ts-expired":    {"send", "new key (the tombstone's horizon ended at 2026-12-01T09:59:00Z): it would be sent to Destination demo"},
		"ts-unfinished": {"send", "went before it finished (InProgress)"},
		"brand-new":     {"send", "new key: it would be sent to Destination demo"},
		"elsewhere":     {"send", "once Destination nowhere exists (it does not: the action would wait)"},
	}
	rows := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 4 || f[0] != ns {
			t.Fatalf("unexpected row %q in\n%s", l, out)
		}
		rows[f[1]] = l
	}
	for name, w := range want {
		row, ok := rows[name]
		if !ok {
			t.Errorf("no row for %s in\n%s", name, out)
			continue
		}
		if f := strings.Fields(row); f[3] != w[0] {
			t.Errorf("%s: result %q, want %q (%s)", name, f[3], w[0], row)
		}
		mustContain(t, name, row, w[1:]...)
	}
	mustContain(t, "stderr", errOut.String(), "m.yaml: skipped Destination/demo (document 9): not an ExternalAction")

	after := &actionsv1alpha1.ExternalActionList{}
	if err := env.Client.List(context.Background(), after, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) {
		t.Errorf("check created objects: %d actions before, %d after", len(before.Items), len(after.Items))
	}

	// Only sendable actions: exit status 0.
	out.Reset()
	ok := "apiVersion: actions.actionledger.dev/v1alpha1\nkind: ExternalAction\nmetadata: {name: fine}\n" +
		"spec: {destinationRef: {name: demo}, request: {path: /a}}\n"
	if err := p.Check(context.Background(), strings.NewReader(ok), "ok.yaml"); err != nil {
		t.Errorf("check of a new action: %v\n%s", err, out)
	}
}

// The built binary works as kubectl runs a plugin: "kubectl actionledger why NAME" finds kubectl-actionledger
// on PATH, and --kubeconfig and -n reach it.
func TestBinaryAsKubectlPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	ns := env.Namespace(t)
	createAction(t, envtestutil.Action(ns, "x", "demo", "/x", ""), func(st *actionsv1alpha1.ExternalActionStatus) {
		st.Attempts = 1
		withPhase(st, actionsv1alpha1.PhaseOutcomeUnknown, actionsv1alpha1.ReasonOutcomeUnknown, "attempt 1 may have been applied")
	})
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := envtestutil.Build(ctx, dir, map[string]string{"kubectl-actionledger": "./cmd/kubectl-actionledger"}); err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(envtestutil.AssetsDir(), "kubectl")
	kubeconfig := env.Kubeconfig(t)
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG=")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	list, err := run("plugin", "list")
	if err != nil || !strings.Contains(list, filepath.Join(dir, "kubectl-actionledger")) {
		t.Errorf("kubectl plugin list: %v\n%s", err, list)
	}
	out, err := run("actionledger", "why", "x", "--kubeconfig", kubeconfig, "-n", ns)
	if err != nil {
		t.Fatalf("kubectl actionledger why x: %v\n%s", err, out)
	}
	mustContain(t, "kubectl actionledger why", out, "ExternalAction "+ns+"/x is OutcomeUnknown", "kubectl actionledger resolve x retry")
	out, err = run("actionledger", "resolve", "x", "sometimes", "--kubeconfig", kubeconfig, "-n", ns)
	if err == nil || !strings.Contains(out, `error: unknown decision "sometimes"`) {
		t.Errorf("a bad decision: %v, %s", err, lines(out))
	}
}

// "why" on an action that waits behind another action of the same subject names that action and, when its
// outcome is unknown, the command that shows what to decide.
func TestExplainSubject(t *testing.T) {
	xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "refund-19"}}
	xa.Spec.Subject = "order/19"
	withPhase(&xa.Status, actionsv1alpha1.PhasePending, actionsv1alpha1.ReasonSubjectOutcomeUnknown,
		`subject "order/19" is held by ExternalAction charge-19, whose outcome is unknown; nothing is sent until a person decides it`)
	out := strings.Join(plugin.Explain(xa, nil, time.Now()), "\n")
	mustContain(t, "stalled", out, `share the subject "order/19" run one at a time`, "It is Stalled: charge-19 holds the subject",
		"kubectl actionledger why charge-19 -n shop", "resumes by itself once charge-19 is resolved or deleted")

	withPhase(&xa.Status, actionsv1alpha1.PhasePending, actionsv1alpha1.ReasonWaitingForSubject,
		`subject "order/19" is held by ExternalAction charge-19; nothing is sent until it finishes, is resolved or is deleted`)
	out = strings.Join(plugin.Explain(xa, nil, time.Now()), "\n")
	mustContain(t, "waiting", out, "It goes once charge-19 finishes, is resolved or is deleted. Nothing to do: wait.")
	if strings.Contains(out, "Stalled") {
		t.Errorf("a plain wait is explained as a stall:\n%s", out)
	}
}
