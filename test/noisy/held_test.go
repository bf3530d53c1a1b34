package noisy

import (
	"strings"
	"testing"
)

// Held reads the namespace of each actionledger_reconciles_dominant series at 1, and HeldCounts tallies scrapes,
// a scrape with no such series as "none".
func TestHeldCounts(t *testing.T) {
	scrape := func(text string) Metrics {
		t.Helper()
		m, err := ParseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	held := scrape("actionledger_reconciles_dominant{namespace=\"team-a\"} 1\nactionledger_reconciles_parked 3\n")
	if got := held.Held(); len(got) != 1 || got[0] != "team-a" {
		t.Fatalf("Held() = %v; want [team-a]", got)
	}
	var h HeldCounts
	h.Add(held)
	h.Add(scrape("actionledger_reconciles_parked 0\n"))
	h.Add(held)
	if got, want := h.String(), "none 1, team-a 2 of 3 samples"; got != want {
		t.Fatalf("String() = %q; want %q", got, want)
	}
}
