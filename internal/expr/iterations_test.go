package expr

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// headerSplits is an expression that iterates over the characters of n header values, each up to
// maxHeaderValueBytes (8,192 iterations), and longHeaders the n headers it reads, each that long.
func headerSplits(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `response.headers['x-h` + strings.Repeat("a", i) + `'].split('').all(c, true)`
	}
	return strings.Join(parts, " && ")
}

func longHeaders(n int) http.Header {
	h := http.Header{}
	for i := range n {
		h["X-H"+strings.Repeat("a", i)] = []string{strings.Repeat("b", maxHeaderValueBytes)}
	}
	return h
}

// comboWorst spends the budget on both: one header value split into its 8,192 characters (the iteration work
// of one comprehension allows), then a 1,003-instruction pattern over another header value.
var comboWorst = headerSplits(1) + ` && !response.headers['x-hb'].matches('(?:a?){500}z')`

// iterationShapes are the comprehension shapes BenchmarkBombHeap measures: the worst admitted ones found (the
// largest comprehensions the bound on iteration work allows, as many as it allows), one that also spends the
// rest of the budget on matching, and the one the bound now refuses, which ran until EvalTimeout.
var iterationShapes = []benchShape{
	{"iterations: worst admitted output, a header value split into 8,192 characters", headerSplits(1), true,
		`{}`, longHeaders(1)},
	{"iterations: worst admitted predicate, the body's string split into 4,088 characters 5 times",
		strings.TrimSuffix(strings.Repeat(`response.body.s.split('').all(c, true) && `, 5), " && "), false,
		stringBody(4088), nil},
	{"iterations and matches: a header split, then 1,003 instructions over another header (output)", comboWorst,
		true, `{}`, comboHeaders()},
	{"iterations: all(x, true) over 131,000 elements (output), refused at create by the bound",
		`response.body.l.all(x, true)`, true, `{"l":[` + strings.TrimSuffix(strings.Repeat("1,", 131_000), ",") + `]}`, nil},
}

func comboHeaders() http.Header {
	h := longHeaders(1)
	h["X-Hb"] = []string{strings.Repeat("a", maxHeaderValueBytes)}
	return h
}

// A comprehension whose iteration work (cel-go's cost tracker is quadratic in a comprehension's iterations) can
// exceed maxIterationWork is refused at compile: all(x, true) over 131,000 elements, estimated within the
// budget, ran until EvalTimeout. The ranges it can bound are admitted.
func TestIterationsBounded(t *testing.T) {
	fiveSplits := strings.TrimSuffix(strings.Repeat(`response.body.s.split('').all(c, true) && `, 5), " && ")
	for _, tc := range []struct {
		src          string
		value, admit bool
	}{
		{`response.body.l.all(x, true)`, true, false},
		{`response.body.all(k, true)`, true, false},
		{`response.body.s.split(',').exists(x, x == 'a')`, true, false},
		{`(response.body.l + response.body.m).exists(x, x == 1)`, true, false},
		{`response.body.l.all(x, true)`, false, true},
		{`response.body.s.split('').all(c, true)`, false, true},
		{fiveSplits, false, true},
		{fiveSplits + ` && response.body.s.split('').all(c, true)`, false, false},
		{`response.body.l.exists(x, response.body.l.exists(y, true))`, false, false},
		{`response.headers.all(k, k != '')`, true, true},
		{`response.headers['link'].split(',').exists(l, l == 'next')`, true, true},
		{`[1, 2, 3].map(x, x * 2).size() == 3`, true, true},
		{`[1, 2, 3].map(x, x * 2).filter(x, x > 2).exists(x, x == 4)`, true, true},
		{headerSplits(1), true, true},
		{headerSplits(2), true, false},
		{comboWorst, true, true},
	} {
		var err error
		if tc.value {
			_, err = CompileValue(tc.src)
		} else {
			_, err = Compile(tc.src)
		}
		if tc.admit != (err == nil) {
			t.Errorf("%.100s (output %v): compile = %v, want admitted %v", tc.src, tc.value, err, tc.admit)
		}
		if err != nil && !errors.Is(err, ErrTooExpensive) {
			t.Errorf("%.100s: %v, want ErrTooExpensive", tc.src, err)
		}
	}
	_, err := CompileValue(`response.body.l.all(x, true)`)
	if err == nil || !strings.Contains(err.Error(), "up to 131072 elements") ||
		!strings.Contains(err.Error(), "about 10000 iterations of one comprehension") {
		t.Errorf("error %v does not state the bound", err)
	}
	// The worst admitted ones finish on the largest inputs they can see.
	p, err := CompileValue(comboWorst)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := p.EvalString(context.Background(), Response{StatusCode: 200, Header: comboHeaders()}); s != "true" ||
		err != nil {
		t.Errorf("%s = %q, %v; want true", comboWorst, s, err)
	}
	q, err := Compile(fiveSplits)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := q.Eval(jsonResp(200, stringBody(4088))); !ok || err != nil {
		t.Errorf("%s = %v, %v; want true", fiveSplits, ok, err)
	}
}
