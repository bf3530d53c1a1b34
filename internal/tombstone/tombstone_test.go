package tombstone

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

func TestNeedsWrite(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	done := metav1.NewTime(t0)
	cur := actionsv1alpha1.ActionTombstoneSpec{Key: "shop/a", Fingerprint: "sha256:aa", Phase: actionsv1alpha1.PhaseSucceeded,
		StatusCode: 201, CompletedAt: &done, UID: "uid-1", ExpiresAt: metav1.NewTime(t0.Add(time.Hour)),
		Response: &actionsv1alpha1.ResponseRecord{StatusCode: 201, Body: "{}"}}
	with := func(f func(*actionsv1alpha1.ActionTombstoneSpec)) *actionsv1alpha1.ActionTombstoneSpec {
		s := *cur.DeepCopy()
		f(&s)
		return &s
	}
	for _, c := range []struct {
		name   string
		next   *actionsv1alpha1.ActionTombstoneSpec
		writer types.UID
		want   bool
	}{
		{"same record, same object", with(func(*actionsv1alpha1.ActionTombstoneSpec) {}), "uid-1", false},
		{"own second write later", with(func(s *actionsv1alpha1.ActionTombstoneSpec) { s.ExpiresAt = metav1.NewTime(t0.Add(2 * time.Hour)) }), "uid-1", false},
		{"replayed copy extends", with(func(s *actionsv1alpha1.ActionTombstoneSpec) { s.ExpiresAt = metav1.NewTime(t0.Add(2 * time.Hour)) }), "uid-2", true},
		{"replayed copy within a second", with(func(s *actionsv1alpha1.ActionTombstoneSpec) {
			s.ExpiresAt = metav1.NewTime(t0.Add(time.Hour + 500*time.Millisecond))
		}), "uid-2", false},
		{"replayed copy earlier", with(func(s *actionsv1alpha1.ActionTombstoneSpec) { s.ExpiresAt = metav1.NewTime(t0) }), "uid-2", false},
		{"other fingerprint", with(func(s *actionsv1alpha1.ActionTombstoneSpec) { s.Fingerprint = "sha256:bb" }), "uid-3", true},
		{"other phase", with(func(s *actionsv1alpha1.ActionTombstoneSpec) { s.Phase = actionsv1alpha1.PhaseFailed }), "uid-1", true},
		{"other response", with(func(s *actionsv1alpha1.ActionTombstoneSpec) { s.Response.Body = `{"x":1}` }), "uid-1", true},
		{"response dropped", with(func(s *actionsv1alpha1.ActionTombstoneSpec) { s.Response = nil }), "uid-1", true},
	} {
		if got := NeedsWrite(&cur, c.next, c.writer); got != c.want {
			t.Errorf("%s: NeedsWrite = %v, want %v", c.name, got, c.want)
		}
	}
}

type fake struct {
	rec *Record
	err error
	n   int
}

func (f *fake) Name() string { return "fake" }
func (f *fake) Lookup(context.Context, *actionsv1alpha1.ExternalAction) (*Record, error) {
	f.n++
	return f.rec, f.err
}
func (f *fake) Write(context.Context, *Record, types.UID) error     { f.n++; return f.err }
func (f *fake) Expire(context.Context, time.Time, int) (int, error) { f.n++; return 0, f.err }

// Chain asks the fallback only when the primary answered "absent"; an unanswered primary is unknown.
func TestChain(t *testing.T) {
	hit := &Record{Name: "old"}
	live := &Record{Name: "new", Spec: actionsv1alpha1.ActionTombstoneSpec{ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour))}}
	expired := &Record{Name: "expired", Spec: actionsv1alpha1.ActionTombstoneSpec{ExpiresAt: metav1.NewTime(time.Now().Add(-time.Minute))}}
	for _, c := range []struct {
		name     string
		primary  *fake
		fallback *fake
		want     *Record
		wantErr  bool
		asked    int
	}{
		{"primary has it", &fake{rec: live}, &fake{rec: hit}, live, false, 0},
		{"primary's is expired, fallback has one", &fake{rec: expired}, &fake{rec: hit}, hit, false, 1},
		{"primary's is expired, fallback has none", &fake{rec: expired}, &fake{}, expired, false, 1},
		{"fallback has it", &fake{}, &fake{rec: hit}, hit, false, 1},
		{"neither", &fake{}, &fake{}, nil, false, 1},
		{"primary down", &fake{err: errors.New("down")}, &fake{rec: hit}, nil, true, 0},
		{"fallback down", &fake{}, &fake{err: errors.New("down")}, nil, true, 1},
	} {
		ch := Chain{Primary: c.primary, Fallback: c.fallback}
		got, err := ch.Lookup(context.Background(), &actionsv1alpha1.ExternalAction{})
		if (err != nil) != c.wantErr || (got == nil) != (c.want == nil) || (got != nil && got.Name != c.want.Name) || c.fallback.n != c.asked {
			t.Errorf("%s: Lookup = %+v, %v (fallback asked %d times), want %+v, error %v, asked %d", c.name, got, err, c.fallback.n, c.want, c.wantErr, c.asked)
		}
		_ = ch.Write(context.Background(), &Record{}, "")
		_, _ = ch.Expire(context.Background(), time.Now(), 1)
		if c.fallback.n != c.asked {
			t.Errorf("%s: Write or Expire reached the fallback", c.name)
		}
	}
}
