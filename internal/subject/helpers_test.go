package subject

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// The actions of these tests live in namespace ns and act on subject subj unless a builder option says otherwise.
const (
	ns   = "shop"
	subj = "order/19"
)

// t0 is a whole second, so that times survive the fake client's round trip (metav1.Time keeps seconds,
// MicroTime microseconds).
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := actionsv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// action is an ExternalAction named name in ns on subj, created at created, with UID "uid-<name>" and phase
// Pending, changed by opts.
func action(name string, created time.Time, opts ...func(*actionsv1alpha1.ExternalAction)) *actionsv1alpha1.ExternalAction {
	xa := &actionsv1alpha1.ExternalAction{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created),
		},
		Spec:   actionsv1alpha1.ExternalActionSpec{Subject: subj},
		Status: actionsv1alpha1.ExternalActionStatus{Phase: actionsv1alpha1.PhasePending},
	}
	for _, o := range opts {
		o(xa)
	}
	return xa
}

func phase(p actionsv1alpha1.Phase) func(*actionsv1alpha1.ExternalAction) {
	return func(xa *actionsv1alpha1.ExternalAction) { xa.Status.Phase = p }
}

// claimed gives the action an open claim (an attempt in flight, its outcome not recorded).
func claimed(xa *actionsv1alpha1.ExternalAction) {
	xa.Status.Claim = &actionsv1alpha1.AttemptClaim{Attempt: 1, Holder: "manager-a",
		StartedAt: metav1.NewTime(t0), ExpiresAt: metav1.NewTime(t0.Add(time.Minute))}
}

// deleting marks the action deleted and held by a finalizer.
func deleting(xa *actionsv1alpha1.ExternalAction) {
	xa.DeletionTimestamp = new(metav1.NewTime(t0))
	xa.Finalizers = []string{"actions.actionledger.dev/tombstone"}
}

func inNamespace(n string) func(*actionsv1alpha1.ExternalAction) {
	return func(xa *actionsv1alpha1.ExternalAction) { xa.Namespace = n }
}

func onSubject(s string) func(*actionsv1alpha1.ExternalAction) {
	return func(xa *actionsv1alpha1.ExternalAction) { xa.Spec.Subject = s }
}

func withUID(uid string) func(*actionsv1alpha1.ExternalAction) {
	return func(xa *actionsv1alpha1.ExternalAction) { xa.UID = types.UID(uid) }
}

// condition sets a status condition of the action.
func condition(typ, reason string, status metav1.ConditionStatus, since time.Time) func(*actionsv1alpha1.ExternalAction) {
	return func(xa *actionsv1alpha1.ExternalAction) {
		xa.Status.Conditions = append(xa.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(since),
		})
	}
}

// waitingFor sets the Ready condition an action has while it waits for its subject with reason.
func waitingFor(reason string) func(*actionsv1alpha1.ExternalAction) {
	return condition(actionsv1alpha1.ConditionReady, reason, metav1.ConditionFalse, t0)
}

// lease is the subject Lease of subj in ns held by holder ("" leaves holderIdentity unset).
func lease(holder string, opts ...func(*coordinationv1.Lease)) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: LeaseName(subj)}}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// id is the holderIdentity of the action built by action(name, ...).
func id(name string) string { return name + "/uid-" + name }

// builderIndexer registers the package's own indexes (Index) with a fake client builder, so that the fake
// client's MatchingFields lists run the production extractors.
type builderIndexer struct{ b *fake.ClientBuilder }

func (i builderIndexer) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	i.b.WithIndex(obj, field, fn)
	return nil
}

// fakeLock is a Lock over one fake client holding objs (it is both the cache and the API reader) through
// the interceptors funcs (zero: none), with a fake clock at clockAt. The returned client is the fake one
// without the interceptors, to look at what the Lock left.
func fakeLock(t *testing.T, objs []client.Object, funcs interceptor.Funcs) (*Lock, client.WithWatch) {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)
	if err := Index(context.Background(), builderIndexer{b}); err != nil {
		t.Fatal(err)
	}
	c := b.Build()
	ic := interceptor.NewClient(c, funcs)
	return &Lock{Client: ic, APIReader: ic, Clock: clocktesting.NewFakePassiveClock(clockAt)}, c
}

// clockAt is the time of the Lock's clock in these tests (newLease stamps it); Hold's now is passed in.
var clockAt = t0.Add(time.Hour)

// getLease reads the subject Lease of subj in ns; nil when there is none.
func getLease(t *testing.T, c client.Reader) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: LeaseName(subj)}, l); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		t.Fatal(err)
	}
	return l
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
