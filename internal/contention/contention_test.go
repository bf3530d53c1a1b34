package contention

import (
	"testing"
	"time"
)

func TestOthersSeesTheLatestRequestOfAnyOtherNamespace(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var r Recent
	if r.Others("a", t0, 0) {
		t.Fatal("nothing seen yet, yet others asked")
	}
	r.Mark("a", at(0))
	r.Mark("a", at(100))
	if r.Others("a", at(200), 0) {
		t.Fatal("only a asked, yet a sees others")
	}
	if !r.Others("b", at(200), 0) {
		t.Fatal("a asked 100 ms ago, yet b does not see it")
	}
	r.Mark("b", at(300))
	r.Mark("c", at(400))
	r.Mark("c", at(500))
	for _, tc := range []struct {
		ns   string
		now  int
		want bool
	}{
		{"c", 1200, true},  // b at 300: within the second
		{"c", 1300, false}, // b's is a second old, and a's older
		{"a", 1499, true},  // c at 500
		{"a", 1500, false},
		{"b", 1499, true},
	} {
		if got := r.Others(tc.ns, at(tc.now), time.Second); got != tc.want {
			t.Errorf("Others(%s, +%d ms) = %v; want %v", tc.ns, tc.now, got, tc.want)
		}
	}
}
