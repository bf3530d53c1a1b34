package ecosystem_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// argoCMKey is the argocd-cm key Argo CD reads a custom health check from: resource.customizations.health.<group>_<kind>.
const argoCMKey = "resource.customizations.health.actions.actionledger.dev_ExternalAction"

// argoWant is the Argo CD health of each phase (docs/gitops.md). OutcomeUnknown is Degraded, not Suspended:
// only a person can decide it, and Degraded is what Argo CD's notifications and sync waves treat as broken.
var argoWant = map[actionsv1alpha1.Phase]string{
	actionsv1alpha1.PhasePending:        "Progressing",
	actionsv1alpha1.PhaseInProgress:     "Progressing",
	actionsv1alpha1.PhaseSucceeded:      "Healthy",
	actionsv1alpha1.PhaseFailed:         "Degraded",
	actionsv1alpha1.PhaseOutcomeUnknown: "Degraded",
	actionsv1alpha1.PhaseExhausted:      "Degraded",
	actionsv1alpha1.PhaseConflict:       "Degraded",
}

func healthScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "argocd", "health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// argoHealth runs script the way Argo CD runs a health check: obj is the live object as a Lua table, with
// only the base, table, string and math libraries; the script returns {status, message}.
func argoHealth(t *testing.T, script string, obj map[string]any) (status, message string) {
	t.Helper()
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		t.Fatalf("health.lua failed: %v", err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health.lua returned %s, want a table", L.Get(-1).Type())
	}
	return ret.RawGetString("status").String(), ret.RawGetString("message").String()
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(x)
	case string:
		return lua.LString(x)
	case int64:
		return lua.LNumber(x)
	case int:
		return lua.LNumber(x)
	case float64:
		return lua.LNumber(x)
	case map[string]any:
		tb := L.NewTable()
		for k, e := range x {
			tb.RawSetString(k, toLua(L, e))
		}
		return tb
	case []any:
		tb := L.NewTable()
		for i, e := range x {
			tb.RawSetInt(i+1, toLua(L, e))
		}
		return tb
	default:
		panic("unexpected JSON value type")
	}
}

// checkArgoHealth reads the real objects of every phase through health.lua.
func checkArgoHealth(t *testing.T, run *realPhases) {
	script := healthScript(t)
	for _, phase := range allPhases {
		u := run.objs[phase]
		status, msg := argoHealth(t, script, u.Object)
		if status != argoWant[phase] {
			t.Errorf("%s (%s): Argo CD health %s (%q), want %s", phase, u.GetName(), status, msg, argoWant[phase])
		}
		if !strings.Contains(msg, string(phase)) {
			t.Errorf("%s: message %q does not name the phase", phase, msg)
		}
		if phase == actionsv1alpha1.PhaseOutcomeUnknown && !strings.Contains(msg, actionsv1alpha1.AnnotationResolve) {
			t.Errorf("OutcomeUnknown message %q does not say how to decide", msg)
		}

		// A spec change the controller has not observed yet: Progressing, whatever the recorded phase.
		stale := u.DeepCopy()
		stale.SetGeneration(stale.GetGeneration() + 1)
		if status, _ := argoHealth(t, script, stale.Object); status != "Progressing" {
			t.Errorf("%s with observedGeneration behind generation: %s, want Progressing", phase, status)
		}
		// No status yet (just created): Progressing.
		fresh := u.DeepCopy()
		delete(fresh.Object, "status")
		if status, _ := argoHealth(t, script, fresh.Object); status != "Progressing" {
			t.Errorf("%s without status: %s, want Progressing", phase, status)
		}
	}
}

// The argocd-cm patch carries health.lua verbatim under the key Argo CD reads.
func TestArgoConfigMapPatchCarriesHealthScript(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "argocd", "argocd-cm-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := yaml.UnmarshalStrict(b, cm); err != nil {
		t.Fatalf("argocd-cm-patch.yaml: %v", err)
	}
	if cm.Name != "argocd-cm" || cm.Kind != "ConfigMap" {
		t.Errorf("patch is %s %s, want ConfigMap argocd-cm", cm.Kind, cm.Name)
	}
	if got, want := cm.Data[argoCMKey], healthScript(t); got != want {
		t.Errorf("argocd-cm %s differs from config/argocd/health.lua; regenerate the patch", argoCMKey)
	}
}

// Cases that do not need a cluster: an unknown phase, and conditions without a Ready message.
func TestArgoHealthEdgeCases(t *testing.T) {
	script := healthScript(t)
	obj := func(phase string, gen, observed int64) map[string]any {
		return map[string]any{
			"apiVersion": "actions.actionledger.dev/v1alpha1", "kind": "ExternalAction",
			"metadata": map[string]any{"name": "x", "namespace": "y", "generation": gen},
			"status":   map[string]any{"phase": phase, "observedGeneration": observed},
		}
	}
	for _, tc := range []struct {
		name       string
		obj        map[string]any
		wantStatus string
	}{
		{"empty phase", obj("", 1, 1), "Progressing"},
		{"future phase", obj("Paused", 1, 1), "Unknown"},
		{"succeeded without conditions", obj("Succeeded", 2, 2), "Healthy"},
		{"exhausted without conditions", obj("Exhausted", 1, 1), "Degraded"},
		{"succeeded, generation ahead", obj("Succeeded", 3, 2), "Progressing"},
		{"no generation at all", map[string]any{"status": map[string]any{"phase": "Failed"}}, "Degraded"},
		{"pending behind an OutcomeUnknown holder of its subject", map[string]any{"status": map[string]any{
			"phase": "Pending", "conditions": []any{
				map[string]any{"type": "Reconciling", "status": "False", "reason": actionsv1alpha1.ReasonSubjectOutcomeUnknown},
				map[string]any{"type": "Stalled", "status": "True", "reason": actionsv1alpha1.ReasonSubjectOutcomeUnknown},
			}}}, "Degraded"},
		{"pending, waiting for its subject", map[string]any{"status": map[string]any{
			"phase": "Pending", "conditions": []any{
				map[string]any{"type": "Reconciling", "status": "True", "reason": actionsv1alpha1.ReasonWaitingForSubject},
				map[string]any{"type": "Stalled", "status": "False", "reason": actionsv1alpha1.ReasonWaitingForSubject},
			}}}, "Progressing"},
	} {
		if got, msg := argoHealth(t, script, tc.obj); got != tc.wantStatus {
			t.Errorf("%s: %s (%q), want %s", tc.name, got, msg, tc.wantStatus)
		}
	}
}
