package expr

import (
	"strings"
	"testing"
	"time"
)

func TestZZ(t *testing.T) {
	for _, n := range []int{10000, 20000, 40000} {
		body := `{"l":[` + strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}`
		st := time.Now()
		err2 := uncheckedEval(t, `response.body.l.all(x, true)`, true, body)
		t.Log(n, err2, time.Since(st))
	}
}
