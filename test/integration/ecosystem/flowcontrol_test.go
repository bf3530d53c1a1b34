package ecosystem_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/actionledger/actionledger/test/envtestutil"
)

const (
	flowSchemaName    = "actionledger-manager-flowschema"
	priorityLevelName = "actionledger-manager"
	// The response headers in which the API server names the FlowSchema and priority level of a request.
	headerFlowSchema    = "X-Kubernetes-PF-FlowSchema-UID"
	headerPriorityLevel = "X-Kubernetes-PF-PriorityLevel-UID"
)

// classify sends GET /version as the ServiceAccount ns/name and returns the UIDs of the FlowSchema and the
// priority level the API server put the request in.
func classify(t *testing.T, ns, name string) (flowSchema, priorityLevel string) {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/version", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /version as %s/%s: %s: %s %v", ns, name, resp.Status, body, resp.Header)
	}
	return resp.Header.Get(headerFlowSchema), resp.Header.Get(headerPriorityLevel)
}

// The chart's FlowSchema sends the manager's requests to the manager's priority level on a real API server, and
// leaves another ServiceAccount's alone; priorityAndFairness.enabled=false renders neither object, and the
// level's shares follow the values.
func TestHelmChartPriorityAndFairness(t *testing.T) {
	objs := helmTemplate(t)
	fs, plc := find(objs, "FlowSchema", flowSchemaName), find(objs, "PriorityLevelConfiguration", priorityLevelName)
	if fs == nil || plc == nil {
		t.Fatalf("the default values render no FlowSchema %s or PriorityLevelConfiguration %s: %v", flowSchemaName,
			priorityLevelName, keys(objs))
	}
	checkAPFValues(t)

	ctx := context.Background()
	created := map[string]string{}
	for _, o := range []*unstructured.Unstructured{plc.DeepCopy(), fs.DeepCopy()} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s: %v", key(o), err)
		}
		created[o.GetKind()] = string(o.GetUID())
		t.Cleanup(func() {
			if err := env.Client.Delete(context.Background(), o); err != nil {
				t.Errorf("deleting %s: %v", key(o), err)
			}
		})
	}
	var gotFS, gotPL string
	envtestutil.Eventually(t, 30*time.Second, func() string {
		return fmt.Sprintf("the manager's requests in FlowSchema %s and level %s (want %v)", gotFS, gotPL, created)
	}, func() bool {
		gotFS, gotPL = classify(t, installNamespace, managerSA)
		return gotFS == created["FlowSchema"] && gotPL == created["PriorityLevelConfiguration"]
	})
	if otherFS, otherPL := classify(t, installNamespace, "someone-else"); otherFS == "" || otherFS == created["FlowSchema"] ||
		otherPL == created["PriorityLevelConfiguration"] {
		t.Errorf("another ServiceAccount's request went to the manager's FlowSchema or level (%s, %s)", otherFS, otherPL)
	}
}

// checkAPFValues renders the chart with priorityAndFairness off, with other shares, and with a ServiceAccount the
// chart does not create.
func checkAPFValues(t *testing.T) {
	t.Helper()
	for _, o := range helmTemplate(t, "--set", "priorityAndFairness.enabled=false") {
		if o.GetKind() == "FlowSchema" || o.GetKind() == "PriorityLevelConfiguration" {
			t.Errorf("priorityAndFairness.enabled=false renders %s", key(o))
		}
	}
	tuned := find(helmTemplate(t, "--set", "priorityAndFairness.nominalConcurrencyShares=10",
		"--set", "priorityAndFairness.lendablePercent=0"), "PriorityLevelConfiguration", priorityLevelName)
	limited, _, _ := unstructured.NestedMap(tuned.Object, "spec", "limited")
	if fmt.Sprint(limited["nominalConcurrencyShares"]) != "10" || fmt.Sprint(limited["lendablePercent"]) != "0" {
		t.Errorf("the level %v, want nominalConcurrencyShares 10 and lendablePercent 0", limited)
	}
	own := find(helmTemplate(t, "--set", "serviceAccount.enabled=false", "--set", "serviceAccount.name=ops-sa"),
		"FlowSchema", flowSchemaName)
	if !containsSA(own, "ops-sa") {
		rules, _, _ := unstructured.NestedSlice(own.Object, "spec", "rules")
		t.Errorf("with serviceAccount.name=ops-sa the FlowSchema's rules are %v", rules)
	}
	dryRunApply(t, []*unstructured.Unstructured{tuned})
}

// containsSA reports whether a FlowSchema's first rule has the ServiceAccount name in the release namespace.
func containsSA(fs *unstructured.Unstructured, name string) bool {
	rules, _, _ := unstructured.NestedSlice(fs.Object, "spec", "rules")
	if len(rules) == 0 {
		return false
	}
	subjects, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "subjects")
	for _, s := range subjects {
		n, _, _ := unstructured.NestedString(s.(map[string]any), "serviceAccount", "name")
		ns, _, _ := unstructured.NestedString(s.(map[string]any), "serviceAccount", "namespace")
		if n == name && ns == installNamespace {
			return true
		}
	}
	return false
}
