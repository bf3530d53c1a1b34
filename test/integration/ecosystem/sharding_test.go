package ecosystem_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/shard"
	"github.com/actionledger/actionledger/test/envtestutil"
)

const shardingSample = "config/samples/sharding"

// The two-shard sample renders two manager Deployments whose --watch-label-selector values are disjoint and
// together cover every ExternalAction (labeled or not), with different leader-election IDs and Deployment
// selectors that do not select each other's pods; every object is accepted by a real API server (dry run).
func TestShardingSampleRendersTwoDisjointShards(t *testing.T) {
	objs := render(t, shardingSample)
	selectors := map[string]labels.Selector{}
	var deployments []*appsv1.Deployment
	for _, name := range []string{managerSA, managerSA + "-shard2"} {
		u := find(objs, "Deployment", name)
		if u == nil {
			t.Fatalf("no Deployment %s in the render of %s", name, shardingSample)
		}
		d := &appsv1.Deployment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
			t.Fatal(err)
		}
		deployments = append(deployments, d)
		for _, arg := range d.Spec.Template.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(arg, "--watch-label-selector="); ok {
				sel, err := labels.Parse(v)
				if err != nil {
					t.Fatalf("%s: %s: %v", name, arg, err)
				}
				selectors[v] = sel
			}
		}
		if d.Spec.Template.Spec.ServiceAccountName != managerSA {
			t.Errorf("%s runs as %q, want %s", name, d.Spec.Template.Spec.ServiceAccountName, managerSA)
		}
	}
	if len(selectors) != 2 {
		t.Fatalf("watch selectors %v: want two different ones", selectors)
	}
	ids := map[string]bool{}
	for v := range selectors {
		ids[app.ShardLeaderElectionID(v)] = true
	}
	if len(ids) != 2 {
		t.Errorf("leader-election IDs %v: want one per shard", ids)
	}
	for _, set := range []labels.Set{{}, {shard.LabelKey: "shard1"}, {shard.LabelKey: "shard2"}, {shard.LabelKey: "other"}, {"team": "a"}} {
		n := 0
		for _, sel := range selectors {
			if sel.Matches(set) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("an ExternalAction labeled %v is watched by %d shards, want exactly 1", set, n)
		}
	}
	for i, d := range deployments {
		other := deployments[1-i]
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if sel.Matches(labels.Set(other.Spec.Template.Labels)) {
			t.Errorf("Deployment %s's selector %v selects the pods of %s", d.Name, sel, other.Name)
		}
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNamespace}}
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating Namespace %s: %v", installNamespace, err)
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		ac := client.ApplyConfigurationFromUnstructured(o.DeepCopy())
		if err := env.Client.Apply(ctx, ac, client.DryRunAll, client.ForceOwnership, client.FieldOwner("ecosystem-test")); err != nil {
			t.Errorf("server-side dry-run apply of %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

// The sample's MutatingAdmissionPolicy, installed for real, gives a new ExternalAction the shard label of its
// namespace, keeps a label the creator set, and leaves the actions of an unlabeled namespace unlabeled (shard 1
// takes them).
func TestShardingSamplePolicyLabelsByNamespace(t *testing.T) {
	ctx := context.Background()
	objs := render(t, shardingSample)
	for _, name := range []string{"actionledger-externalaction-shard", "actionledger-externalaction-shard-binding"} {
		kind := "MutatingAdmissionPolicy"
		if strings.HasSuffix(name, "-binding") {
			kind += "Binding"
		}
		u := find(objs, kind, name)
		if u == nil {
			t.Fatalf("no %s %s in the render", kind, name)
		}
		u = u.DeepCopy()
		if kind == "MutatingAdmissionPolicy" { // an evaluation error fails the create instead of being ignored
			_ = unstructured.SetNestedField(u.Object, "Fail", "spec", "failurePolicy")
		}
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("creating %s %s: %v", kind, name, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(ctx, u) })
	}
	labeled, plain := env.Namespace(t), env.Namespace(t)
	nsObj := &corev1.Namespace{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: labeled}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels[shard.LabelKey] = "shard2"
	if err := env.Client.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	label := func(ns string, own map[string]string) (string, error) {
		xa := envtestutil.Action(ns, "probe", "none", "/", "")
		xa.Labels = own
		if err := env.Client.Create(ctx, xa, client.DryRunAll); err != nil {
			return "", err
		}
		return xa.Labels[shard.LabelKey], nil
	}
	var got string
	var lastErr error
	envtestutil.Eventually(t, 30*time.Second, func() string {
		return fmt.Sprintf("the shard policy to label creates in %s (got %q, last error %v)", labeled, got, lastErr)
	}, func() bool {
		got, lastErr = label(labeled, nil)
		return got == "shard2"
	})
	if got, err := label(labeled, map[string]string{shard.LabelKey: "shard1", "team": "a"}); err != nil || got != "shard1" {
		t.Errorf("an action labeled shard1 by its creator in a shard2 namespace: label %q (%v), want shard1 kept", got, err)
	}
	if got, err := label(plain, map[string]string{"team": "a"}); err != nil || got != "" {
		t.Errorf("an action in an unlabeled namespace: label %q (%v), want none", got, err)
	}
}
