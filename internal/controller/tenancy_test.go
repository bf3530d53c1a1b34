//go:build !unit

package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// countingServer is the recording destination on loopback behind a handler that counts every request it
// receives, whatever its path or method (the post-check routes included).
func countingServer(t *testing.T) (*destination.Server, string, *atomic.Int64) {
	t.Helper()
	srv := destination.New(destination.Options{})
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return srv, ts.URL, &n
}

func stalledReason(xa *actionsv1alpha1.ExternalAction) string {
	if c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionStalled); c != nil {
		return c.Reason
	}
	return ""
}

// destinationSeries counts the series of the real metrics registry whose destination label is id.
func destinationSeries(t *testing.T, id string) int {
	t.Helper()
	fams, err := ctrlmetrics.Registry.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	n := 0
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "destination" && l.GetValue() == id {
					n++
				}
			}
		}
	}
	return n
}

// A ClusterDestination that selects tenant=a sends nothing for an unlabelled namespace (NamespaceNotAllowed
// in the conditions and a Warning Event, phase Pending); labelling the namespace lets the action proceed by
// itself, with exactly one request. Deleting the ClusterDestination removes its metric series.
func TestClusterDestinationNamespaceSelector(t *testing.T) {
	ns := env.Namespace(t)
	srv, url, received := countingServer(t)
	cdName := "tenant-a-" + ns
	cd := &actionsv1alpha1.ClusterDestination{
		ObjectMeta: metav1.ObjectMeta{Name: cdName},
		Spec: actionsv1alpha1.ClusterDestinationSpec{
			DestinationSpec:   actionsv1alpha1.DestinationSpec{URL: url},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "a"}},
			Response:          &actionsv1alpha1.ClusterResponsePolicy{Expose: &actionsv1alpha1.ResponseExposure{}},
		},
	}
	env.Create(t, cd)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cd) })
	env.StartManager(t, app.Options{})

	xa := envtestutil.Action(ns, "sel-1", cdName, "/orders", `{"n":1}`)
	xa.Spec.DestinationRef.Kind = "ClusterDestination"
	env.Create(t, xa)
	got := env.WaitFor(t, ns, "sel-1", 30*time.Second, "reason NamespaceNotAllowed", func(x *actionsv1alpha1.ExternalAction) bool {
		return stalledReason(x) == actionsv1alpha1.ReasonNamespaceNotAllowed
	})
	c := meta.FindStatusCondition(got.Status.Conditions, actionsv1alpha1.ConditionStalled)
	if !strings.Contains(c.Message, cdName) || !strings.Contains(c.Message, ns) {
		t.Errorf("condition message %q does not name the ClusterDestination and the namespace", c.Message)
	}
	if got.Status.Phase != actionsv1alpha1.PhasePending {
		t.Errorf("phase = %q, want Pending", got.Status.Phase)
	}
	env.WaitEvent(t, ns, "sel-1", corev1.EventTypeWarning, actionsv1alpha1.ReasonNamespaceNotAllowed, 10*time.Second)
	envtestutil.Consistently(t, 2*time.Second, func() string {
		return fmt.Sprintf("0 requests and phase Pending (requests %d, status %s)", received.Load(), envtestutil.JSON(env.Get(t, ns, "sel-1").Status))
	}, func() bool {
		return received.Load() == 0 && env.Get(t, ns, "sel-1").Status.Phase == actionsv1alpha1.PhasePending
	})

	// Label the namespace: the Namespace watch wakes the action well before the 15s re-check.
	nsObj := &corev1.Namespace{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{"tenant": "a"}
	if err := env.Client.Update(context.Background(), nsObj); err != nil {
		t.Fatal(err)
	}
	env.WaitPhase(t, ns, "sel-1", actionsv1alpha1.PhaseSucceeded, 10*time.Second)
	if n := received.Load(); n != 1 {
		t.Fatalf("destination received %d requests, want exactly 1", n)
	}
	if got := srv.Requests(ns + "/sel-1"); got != 1 {
		t.Fatalf("requests for the key = %d, want 1", got)
	}

	// Part 7: the ClusterDestination's series go with it.
	id := "ClusterDestination/" + cdName
	if n := destinationSeries(t, id); n == 0 {
		t.Fatalf("no metric series for %s after a send", id)
	}
	if err := env.Client.Delete(context.Background(), cd); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 10*time.Second, func() string {
		return fmt.Sprintf("the series of %s to be deleted (%d left)", id, destinationSeries(t, id))
	}, func() bool { return destinationSeries(t, id) == 0 })
}

// A path that admission accepts but that escapes the base path once decoded (/%2e%2e/admin) sends nothing:
// the action fails with reason PathOutsideBase and the destination receives 0 requests. A clean path on the
// same base goes out under it.
func TestPathOutsideBaseIsNeverSent(t *testing.T) {
	ns := env.Namespace(t)
	srv, url, received := countingServer(t)
	env.CreateDestination(t, ns, "tenant-a", url+"/tenant-a", nil)
	env.StartManager(t, app.Options{})

	var created []string
	for name, path := range map[string]string{"esc-lower": "/%2e%2e/admin", "esc-upper": "/x/%2E%2E/%2E%2E/admin", "esc-slash": "/..%2fadmin"} {
		err := env.Client.Create(context.Background(), envtestutil.Action(ns, name, "tenant-a", path, `{"n":1}`))
		switch {
		case apierrors.IsInvalid(err):
			// Admission rules that refuse such paths are a first line; the controller's check is the last.
			t.Logf("%s: refused at admission: %v", name, err)
		case err != nil:
			t.Fatalf("creating %s: %v", name, err)
		default:
			created = append(created, name)
		}
	}
	for _, name := range created {
		xa := env.WaitPhase(t, ns, name, actionsv1alpha1.PhaseFailed, 30*time.Second)
		st := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionStalled)
		if st == nil || st.Reason != actionsv1alpha1.ReasonPathOutsideBase || !strings.Contains(st.Message, "nothing was sent") {
			t.Errorf("%s: Stalled condition = %+v, want reason PathOutsideBase saying nothing was sent", name, st)
		}
		if xa.Status.Attempts != 0 || xa.Status.Claim != nil {
			t.Errorf("%s: attempts = %d, claim = %+v; want no attempt", name, xa.Status.Attempts, xa.Status.Claim)
		}
	}
	if n := received.Load(); n != 0 {
		t.Fatalf("destination received %d requests, want 0", n)
	}

	env.Create(t, envtestutil.Action(ns, "inside", "tenant-a", "/orders/v1.2?x=../y", `{"n":1}`))
	env.WaitPhase(t, ns, "inside", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	log := srv.RequestLog(ns + "/inside")
	if len(log) != 1 || log[0].Path != "/tenant-a/orders/v1.2" || log[0].Query != "x=../y" {
		t.Fatalf("request log = %+v, want one request to /tenant-a/orders/v1.2 with the query unchanged", log)
	}
}

// Without --insecure-skip-verify-allowed a namespaced Destination that turns TLS verification off is not Ready
// (InsecureSkipVerifyNotAllowed) and its actions wait with nothing sent. Deleting a Destination removes its
// metric series.
func TestInsecureSkipVerifyNeedsTheFlag(t *testing.T) {
	ns := env.Namespace(t)
	_, url, received := countingServer(t)
	env.CreateDestination(t, ns, "insecure", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.TLS = &actionsv1alpha1.TLSConfig{InsecureSkipVerify: true}
	})
	env.CreateDestination(t, ns, "plain", url, nil)
	env.StartManager(t, app.Options{})

	env.Create(t, envtestutil.Action(ns, "tls-off", "insecure", "/orders", `{"n":1}`))
	xa := env.WaitFor(t, ns, "tls-off", 30*time.Second, "reason InsecureSkipVerifyNotAllowed", func(x *actionsv1alpha1.ExternalAction) bool {
		return stalledReason(x) == actionsv1alpha1.ReasonInsecureSkipVerifyNotAllowed
	})
	if xa.Status.Phase != actionsv1alpha1.PhasePending {
		t.Errorf("phase = %q, want Pending", xa.Status.Phase)
	}
	var ready *metav1.Condition
	envtestutil.Eventually(t, 20*time.Second, func() string {
		return fmt.Sprintf("Destination Ready %+v to be False/InsecureSkipVerifyNotAllowed", ready)
	}, func() bool {
		d := &actionsv1alpha1.Destination{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "insecure"}, d); err != nil {
			t.Fatal(err)
		}
		ready = meta.FindStatusCondition(d.Status.Conditions, actionsv1alpha1.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == actionsv1alpha1.ReasonInsecureSkipVerifyNotAllowed
	})
	if !strings.Contains(ready.Message, "--insecure-skip-verify-allowed") {
		t.Errorf("Ready message %q does not name the flag", ready.Message)
	}
	if n := received.Load(); n != 0 {
		t.Fatalf("destination received %d requests, want 0", n)
	}

	// Part 7 for a namespaced Destination.
	env.Create(t, envtestutil.Action(ns, "plain-1", "plain", "/orders", `{"n":1}`))
	env.WaitPhase(t, ns, "plain-1", actionsv1alpha1.PhaseSucceeded, 30*time.Second)
	id := "Destination/" + ns + "/plain"
	if n := destinationSeries(t, id); n == 0 {
		t.Fatalf("no metric series for %s after a send", id)
	}
	if err := env.Client.Delete(context.Background(), &actionsv1alpha1.Destination{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}); err != nil {
		t.Fatal(err)
	}
	envtestutil.Eventually(t, 10*time.Second, func() string {
		return fmt.Sprintf("the series of %s to be deleted (%d left)", id, destinationSeries(t, id))
	}, func() bool { return destinationSeries(t, id) == 0 })
}
