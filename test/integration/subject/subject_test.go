package subject

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/app"
	"github.com/actionledger/actionledger/internal/subject"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// plain: a 1s timeout, no key support, no post-check, and POST (Unsafe): a timed-out send is OutcomeUnknown.
func plain(s *actionsv1alpha1.DestinationSpec) {
	s.Timeout = &metav1.Duration{Duration: time.Second}
}

func onSubject(ns, name, path, subj string) *actionsv1alpha1.ExternalAction {
	xa := envtestutil.Action(ns, name, "pay", path, `{"order":19}`)
	xa.Spec.Subject = subj
	return xa
}

func readyReason(xa *actionsv1alpha1.ExternalAction) (string, string) {
	c := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionReady)
	if c == nil {
		return "", ""
	}
	return c.Reason, c.Message
}

func lease(t *testing.T, ns, subj string) (*coordinationv1.Lease, error) {
	t.Helper()
	l := &coordinationv1.Lease{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: subject.LeaseName(subj)}, l)
	return l, err
}

// A charge that ends OutcomeUnknown blocks the refund on the same subject: the refund sends nothing and shows
// SubjectOutcomeUnknown naming the charge and the decision, until the charge is resolved (applied or
// not-applied) or deleted; then the refund is sent once. An action on another subject is not delayed.
func TestRefundWaitsBehindUnknownCharge(t *testing.T) {
	ns := env.Namespace(t)
	cases := []struct{ order, decision string }{{"19", "not-applied"}, {"21", "applied"}, {"23", "delete"}}
	delay := map[string]time.Duration{}
	for _, c := range cases {
		delay["/charges/"+c.order] = 5 * time.Second // beyond the 1s timeout: uncertain, unprovable
	}
	srv, url := newRecorder(t, delay)
	env.CreateDestination(t, ns, "pay", url, plain)
	env.StartManager(t, app.Options{})

	for _, c := range cases {
		env.Create(t, onSubject(ns, "charge-order-"+c.order, "/charges/"+c.order, "order/"+c.order))
	}
	for _, c := range cases {
		env.WaitPhase(t, ns, "charge-order-"+c.order, actionsv1alpha1.PhaseOutcomeUnknown, 30*time.Second)
		env.Create(t, onSubject(ns, "refund-order-"+c.order, "/refunds/"+c.order, "order/"+c.order))
	}
	for _, c := range cases {
		name := "refund-order-" + c.order
		xa := env.WaitFor(t, ns, name, 20*time.Second, "Stalled SubjectOutcomeUnknown", func(xa *actionsv1alpha1.ExternalAction) bool {
			s := meta.FindStatusCondition(xa.Status.Conditions, actionsv1alpha1.ConditionStalled)
			return s != nil && s.Status == metav1.ConditionTrue && s.Reason == actionsv1alpha1.ReasonSubjectOutcomeUnknown
		})
		reason, msg := readyReason(xa)
		if xa.Status.Phase != actionsv1alpha1.PhasePending || xa.Status.Attempts != 0 || xa.Status.Claim != nil ||
			reason != actionsv1alpha1.ReasonSubjectOutcomeUnknown || !strings.Contains(msg, "charge-order-"+c.order) ||
			!strings.Contains(msg, actionsv1alpha1.AnnotationResolve) {
			t.Errorf("%s waits as phase %s, attempts %d, Ready %s %q", name, xa.Status.Phase, xa.Status.Attempts, reason, msg)
		}
		env.WaitEvent(t, ns, name, "Warning", actionsv1alpha1.ReasonSubjectOutcomeUnknown, 10*time.Second)
		l, err := lease(t, ns, "order/"+c.order)
		charge := env.Get(t, ns, "charge-order-"+c.order)
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != charge.Name+"/"+string(charge.UID) ||
			l.Annotations[subject.Annotation] != "order/"+c.order || l.Labels[subject.LabelHash] == "" {
			t.Errorf("subject Lease of order/%s: %+v (%v)", c.order, l, err)
		}
	}
	checkWideColumns(t, ns, "refund-order-19", "order/19", actionsv1alpha1.ReasonSubjectOutcomeUnknown)

	// Another subject is not blocked by the waiting ones.
	env.Create(t, onSubject(ns, "charge-order-20", "/charges/20", "order/20"))
	env.WaitPhase(t, ns, "charge-order-20", actionsv1alpha1.PhaseSucceeded, 20*time.Second)

	envtestutil.Consistently(t, 2*time.Second, func() string {
		return fmt.Sprintf("a refund was sent while its charge was OutcomeUnknown: %v", srv.arrivals())
	}, func() bool {
		return srv.requests("/refunds/19")+srv.requests("/refunds/21")+srv.requests("/refunds/23") == 0
	})

	for _, c := range cases {
		if c.decision == "delete" {
			if err := env.Client.Delete(context.Background(), env.Get(t, ns, "charge-order-"+c.order)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		env.Annotate(t, ns, "charge-order-"+c.order, map[string]string{actionsv1alpha1.AnnotationResolve: c.decision})
	}
	for _, c := range cases {
		env.WaitPhase(t, ns, "refund-order-"+c.order, actionsv1alpha1.PhaseSucceeded, 30*time.Second)
		if got := srv.requests("/refunds/" + c.order); got != 1 {
			t.Errorf("after %s: /refunds/%s got %d requests, want 1", c.decision, c.order, got)
		}
		if got := srv.requests("/charges/" + c.order); got != 1 {
			t.Errorf("/charges/%s got %d requests, want 1 (an OutcomeUnknown action is never re-sent)", c.order, got)
		}
		// The refund finished: the subject is free again.
		envtestutil.Eventually(t, 10*time.Second, envtestutil.Say("the Lease of order/"+c.order+" is released"), func() bool {
			_, err := lease(t, ns, "order/"+c.order)
			return apierrors.IsNotFound(err)
		})
	}
}

// Two managers and 20 actions on one subject against a slow destination: never two in flight at once, each
// sent once, in creation order.
func TestOneAtATimeAcrossManagers(t *testing.T) {
	ns := env.Namespace(t)
	const n = 20
	delay := map[string]time.Duration{}
	for i := range n {
		delay[fmt.Sprintf("/steps/%02d", i)] = 150 * time.Millisecond
	}
	srv, url := newRecorder(t, delay)
	env.CreateDestination(t, ns, "pay", url, func(s *actionsv1alpha1.DestinationSpec) {
		s.Timeout = &metav1.Duration{Duration: 5 * time.Second}
	})
	env.StartManager(t, app.Options{Holder: "twin-a"})
	env.StartManager(t, app.Options{Holder: "twin-b"})
	// Names sort in creation order, so that the order holds even for actions created within one second.
	for i := range n {
		env.Create(t, onSubject(ns, fmt.Sprintf("step-%02d", i), fmt.Sprintf("/steps/%02d", i), "account/7"))
	}
	for i := range n {
		env.WaitPhase(t, ns, fmt.Sprintf("step-%02d", i), actionsv1alpha1.PhaseSucceeded, 90*time.Second)
	}
	if m := srv.maxInFlight(); m != 1 {
		t.Errorf("at most %d requests were in flight at once on one subject, want 1", m)
	}
	want := make([]string, n)
	for i := range n {
		want[i] = fmt.Sprintf("/steps/%02d", i)
		if got := srv.requests(want[i]); got != 1 {
			t.Errorf("%s got %d requests, want 1", want[i], got)
		}
	}
	if got := srv.arrivals(); !slices.Equal(got, want) {
		t.Errorf("sent in order %v, want creation order %v", got, want)
	}
}

// kubectl get xa -o wide shows the subject and why the action waits (the server-side Table of the CRD's
// printer columns, as kubectl prints it).
func checkWideColumns(t *testing.T, ns, name, subj, reason string) {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	u := fmt.Sprintf("%s/apis/actions.actionledger.dev/v1alpha1/namespaces/%s/externalactions/%s", strings.TrimRight(env.Config.Host, "/"), ns, name)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;g=meta.k8s.io;v=v1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	table := &metav1.Table{}
	if err := json.NewDecoder(resp.Body).Decode(table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("table of %s: %v (%d rows)", name, err, len(table.Rows))
	}
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	if cells["SUBJECT"] != subj || cells["REASON"] != reason || !strings.Contains(fmt.Sprint(cells["MESSAGE"]), "held by") {
		t.Errorf("kubectl get xa -o wide cells = %v", cells)
	}
}
