package retry

import (
	"math"
	"testing"
	"time"
)

func constRnd(r float64) func() float64 { return func() float64 { return r } }

func TestDefaultRetryOnStatus(t *testing.T) {
	want := []int32{408, 425, 429, 500, 502, 503, 504}
	a := DefaultRetryOnStatus()
	if len(a) != len(want) {
		t.Fatalf("DefaultRetryOnStatus() = %v, want %v", a, want)
	}
	for i := range want {
		if a[i] != want[i] {
			t.Fatalf("DefaultRetryOnStatus() = %v, want %v", a, want)
		}
	}
	a[0] = 999
	if b := DefaultRetryOnStatus(); b[0] != 408 {
		t.Fatalf("DefaultRetryOnStatus shares its backing array: %v", b)
	}
}

// TestBackoffGrid covers failed x multiplier x jitter: the capped value is given
// explicitly, jitter is checked against it.
func TestBackoffGrid(t *testing.T) {
	const (
		initial = time.Second
		maxB    = 5 * time.Minute
	)
	// capped[multiplier][failed] is the expected undithered delay.
	capped := map[float64]map[int]time.Duration{
		1:   {0: time.Second, 1: time.Second, 2: time.Second, 62: time.Second, 63: time.Second, 64: time.Second, 1000: time.Second, math.MaxInt32: time.Second},
		1.5: {0: time.Second, 1: time.Second, 2: 1500 * time.Millisecond, 62: maxB, 63: maxB, 64: maxB, 1000: maxB, math.MaxInt32: maxB},
		2:   {0: time.Second, 1: time.Second, 2: 2 * time.Second, 62: maxB, 63: maxB, 64: maxB, 1000: maxB, math.MaxInt32: maxB},
		10:  {0: time.Second, 1: time.Second, 2: 10 * time.Second, 62: maxB, 63: maxB, 64: maxB, 1000: maxB, math.MaxInt32: maxB},
	}
	for mult, byFailed := range capped {
		for failed, c := range byFailed {
			p := Policy{InitialBackoff: initial, MaxBackoff: maxB, Multiplier: mult, Jitter: JitterNone}
			if got := Backoff(p, failed, constRnd(0.5)); got != c {
				t.Errorf("None mult=%v failed=%d: got %v, want %v", mult, failed, got, c)
			}
			p.Jitter = JitterFull
			for _, tc := range []struct {
				r        float64
				lo, hi   time.Duration // inclusive
				describe string
			}{
				{0, MinBackoff, MinBackoff, "floor"},
				{0.5, c / 2, c / 2, "half"},
				{0.999999, c - c/100000, c - 1, "just below the cap"},
			} {
				got := Backoff(p, failed, constRnd(tc.r))
				if got < tc.lo || got > tc.hi {
					t.Errorf("Full mult=%v failed=%d rnd=%v (%s): got %v, want [%v, %v]", mult, failed, tc.r, tc.describe, got, tc.lo, tc.hi)
				}
				if got <= 0 || got > maxB {
					t.Errorf("Full mult=%v failed=%d rnd=%v: got %v, want in (0, %v]", mult, failed, tc.r, got, maxB)
				}
			}
		}
	}
}

func TestBackoffEdges(t *testing.T) {
	const maxDuration = time.Duration(math.MaxInt64)
	tests := []struct {
		name   string
		p      Policy
		failed int
		rnd    float64
		want   time.Duration
	}{
		{"third failure doubles twice", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: JitterNone}, 3, 0, 4 * time.Second},
		{"multiplier 1.5 third failure", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 1.5, Jitter: JitterNone}, 3, 0, 2250 * time.Millisecond},
		{"negative failed is first", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: JitterNone}, -7, 0, time.Second},
		{"min int failed", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: JitterNone}, math.MinInt, 0, time.Second},
		{"max int failed", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: JitterNone}, math.MaxInt, 0, time.Hour},
		{"cap reached exactly", Policy{InitialBackoff: time.Second, MaxBackoff: 8 * time.Second, Multiplier: 2, Jitter: JitterNone}, 4, 0, 8 * time.Second},
		{"cap at 10s", Policy{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, Multiplier: 2, Jitter: JitterNone}, 5, 0, 10 * time.Second},
		{"initial above cap", Policy{InitialBackoff: time.Minute, MaxBackoff: time.Second, Multiplier: 2, Jitter: JitterNone}, 1, 0, time.Second},
		{"zero initial uses MinBackoff", Policy{InitialBackoff: 0, MaxBackoff: time.Second, Multiplier: 2, Jitter: JitterNone}, 1, 0, MinBackoff},
		{"zero max means no growth", Policy{InitialBackoff: 3 * time.Second, Multiplier: 2, Jitter: JitterNone}, 10, 0, 3 * time.Second},
		{"all zero", Policy{}, 5, 0, MinBackoff},
		{"multiplier below 1 is 1", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 0.5, Jitter: JitterNone}, 10, 0, time.Second},
		{"multiplier NaN is 1", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: math.NaN(), Jitter: JitterNone}, 10, 0, time.Second},
		{"multiplier +Inf caps", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: math.Inf(1), Jitter: JitterNone}, 2, 0, time.Hour},
		{"multiplier max float", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: math.MaxFloat64, Jitter: JitterNone}, math.MaxInt32, 0, time.Hour},
		{"max duration cap, None", Policy{InitialBackoff: time.Second, MaxBackoff: maxDuration, Multiplier: 10, Jitter: JitterNone}, math.MaxInt32, 0, maxDuration},
		{"max duration cap, rnd just below 1", Policy{InitialBackoff: time.Second, MaxBackoff: maxDuration, Multiplier: 10, Jitter: JitterFull}, 1000, math.Nextafter(1, 0), maxDuration - 1023},
		{"max duration cap, rnd 1 clamps to cap", Policy{InitialBackoff: time.Second, MaxBackoff: maxDuration, Multiplier: 10, Jitter: JitterFull}, 1000, 1, maxDuration},
		{"rnd above 1 clamps to cap", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: JitterFull}, 1, 7, time.Second},
		{"rnd negative is floor", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: JitterFull}, 1, -1, MinBackoff},
		{"rnd NaN is floor", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: JitterFull}, 1, math.NaN(), MinBackoff},
		{"floor never above a tiny cap", Policy{InitialBackoff: time.Microsecond, MaxBackoff: 10 * time.Microsecond, Multiplier: 2, Jitter: JitterFull}, 3, 0, 4 * time.Microsecond},
		{"empty jitter is Full", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2}, 2, 0.25, 500 * time.Millisecond},
		{"unknown jitter is Full", Policy{InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: "Equal"}, 2, 0.25, 500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Backoff(tc.p, tc.failed, constRnd(tc.rnd)); got != tc.want {
				t.Errorf("Backoff(%+v, %d, %v) = %v, want %v", tc.p, tc.failed, tc.rnd, got, tc.want)
			}
		})
	}
}

func TestBackoffNilRnd(t *testing.T) {
	p := Policy{InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 2, Jitter: JitterFull}
	for range 1000 {
		if d := Backoff(p, 3, nil); d < MinBackoff || d > 4*time.Second {
			t.Fatalf("Backoff with nil rnd = %v, want in [%v, 4s]", d, MinBackoff)
		}
	}
}

func FuzzBackoff(f *testing.F) {
	f.Add(1, 2.0, int64(time.Second), int64(time.Minute), 0.5, false)
	f.Add(0, 1.0, int64(0), int64(0), 0.0, true)
	f.Add(63, 10.0, int64(time.Millisecond), int64(math.MaxInt64), 0.999999, false)
	f.Add(math.MaxInt32, 100.0, int64(1), int64(1), 0.0, false)
	f.Add(math.MinInt, 1.5, int64(-5), int64(-5), -1.0, false)
	f.Add(1000, 1.0000001, int64(math.MaxInt64), int64(time.Hour), math.NaN(), true)
	f.Fuzz(func(t *testing.T, failed int, mult float64, initial, maxB int64, r float64, none bool) {
		if !(mult >= 1 && mult <= 100) {
			mult = 1 + math.Mod(math.Abs(mult), 99) // NaN stays NaN: treated as 1
		}
		p := Policy{InitialBackoff: time.Duration(initial), MaxBackoff: time.Duration(maxB), Multiplier: mult, Jitter: JitterFull}
		if none {
			p.Jitter = JitterNone
		}
		d := Backoff(p, failed, constRnd(r))
		if d <= 0 {
			t.Fatalf("Backoff(%+v, %d, %v) = %v, want > 0", p, failed, r, d)
		}
		if maxB > 0 && d > p.MaxBackoff {
			t.Fatalf("Backoff(%+v, %d, %v) = %v, want <= MaxBackoff", p, failed, r, d)
		}
	})
}
