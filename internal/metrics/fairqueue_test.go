package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Each namespace a queue holds is one series (two managers of one process holding the same namespace too), read
// from the sources at the scrape; a removed source is not read again.
func TestReconcilesDominantReadsItsSourcesAtTheScrape(t *testing.T) {
	c := &dominantCollector{sources: map[int]func() string{}}
	held := "team-a"
	removeA := c.Source(func() string { return held })
	removeB := c.Source(func() string { return "team-a" })
	c.Source(func() string { return "" })
	want := func(series string) {
		t.Helper()
		exp := "# HELP actionledger_reconciles_dominant " + dominantHelp + "\n# TYPE actionledger_reconciles_dominant gauge\n" + series
		if series == "" {
			exp = ""
		}
		if err := testutil.CollectAndCompare(c, strings.NewReader(exp)); err != nil {
			t.Error(err)
		}
	}
	want("actionledger_reconciles_dominant{namespace=\"team-a\"} 1\n")
	held = "team-c"
	want("actionledger_reconciles_dominant{namespace=\"team-a\"} 1\nactionledger_reconciles_dominant{namespace=\"team-c\"} 1\n")
	removeB()
	want("actionledger_reconciles_dominant{namespace=\"team-c\"} 1\n")
	removeA()
	want("")
}
