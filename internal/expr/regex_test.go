package expr

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// row1 is the successWhen of issue 40 row 1 (172 bytes): a pattern built at evaluation, '(?:a?){1000}' doubled
// ten times, which cel-go compiled on every call (+337 MiB for one evaluation).
var row1 = `'a'.matches(['(?:a?){1000}']` + strings.Repeat(".map(x, x + x)", 10) + `[0])`

// worstPredicateMatch and worstValueMatch are the most expensive matches calls admitted (TestMatchesWorstAdmitted):
// the largest programs whose steps over the declared string stay within the budget.
const (
	worstPredicateMatch = `response.body.s.matches('(?:a?){1000}(?:a?){210}z')` // 2,423 instructions over 4 KiB
	worstValueMatch     = `response.body.s.matches('(?:a?){17}z')`              // 37 instructions over 256 KiB
)

// matchShapes are the matches shapes BenchmarkBombHeap measures: the worst admitted calls over inputs they do not
// match (the automaton runs over the whole string), and what the cost limit stops when the estimate is skipped.
var matchShapes = []benchShape{
	{"matches: worst admitted, 2,423 instructions over a 4 KiB string", worstPredicateMatch, false, stringBody(4088), nil},
	{"matches: worst admitted output, 37 instructions over a 256 KiB string", worstValueMatch, true,
		stringBody(262_136), nil},
	{"matches: 4,003 instructions over 250 KB (row 1's CPU variant, output)",
		`response.body.s.matches('(?:a?){1000}(?:a?){1000}z')`, true, stringBody(250_000), nil},
	{"matches: 30 calls of 203 instructions over 8 KB each (output)",
		`[` + strings.TrimSuffix(strings.Repeat(`response.body.l[0], `, 30), ", ") + `].exists(x, x.matches('(?:a?){100}z'))`,
		true, `{"l":["` + strings.Repeat("a", 8000) + `"]}`, nil},
}

// The worst admitted matches calls are admitted, finish within the budget on the largest string they can see,
// and one instruction more is refused.
func TestMatchesWorstAdmitted(t *testing.T) {
	if _, err := Compile(strings.Replace(worstPredicateMatch, "{210}", "{220}", 1)); !errors.Is(err, ErrTooExpensive) {
		t.Errorf("a larger program over 4 KiB: %v, want ErrTooExpensive", err)
	}
	if _, err := CompileValue(strings.Replace(worstValueMatch, "{17}", "{18}", 1)); !errors.Is(err, ErrTooExpensive) {
		t.Errorf("a larger program over 256 KiB: %v, want ErrTooExpensive", err)
	}
	p, err := Compile(worstPredicateMatch)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Eval(jsonResp(200, stringBody(4088))); ok || err != nil {
		t.Errorf("worst predicate = %v, %v; want false, nil", ok, err)
	}
	v, err := CompileValue(worstValueMatch)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := v.EvalString(context.Background(), jsonResp(200, stringBody(262_136))); s != "false" || err != nil {
		t.Errorf("worst output = %q, %v; want false, nil", s, err)
	}
}

// A pattern that is not a string literal is refused at compile, as a predicate and as an output value, with an
// error that tells the user to write a literal (issue 40 row 1).
func TestMatchesPatternMustBeALiteral(t *testing.T) {
	if len(row1) != 172 {
		t.Fatalf("row 1 is %d bytes, want 172", len(row1))
	}
	for _, src := range []string{
		row1,
		`response.body.id.matches(response.body.p)`,
		`matches(response.body.id, 'a' + response.body.p)`,
		`'x'.matches('^a' + 'b$')`,
		`response.body.l.exists(p, 'x'.matches(p))`,
	} {
		for _, compile := range []func(string) error{
			func(s string) error { _, err := Compile(s); return err },
			func(s string) error { _, err := CompileValue(s); return err },
		} {
			err := compile(src)
			if !errors.Is(err, errPatternNotLiteral) || !strings.Contains(err.Error(), "string literal") {
				t.Errorf("%s: compile = %v, want the pattern refused as not a literal", src, err)
			}
		}
	}
}

// A literal pattern whose program exceeds maxRegexInsts is refused at compile (issue 40 row 1: a 16 KiB
// literal pattern cost +460 MiB per evaluation), before its program is built.
func TestMatchesPatternTooLarge(t *testing.T) {
	huge := strings.Repeat("(?:a?){1000}", MaxSourceLength/13) // 16 KiB of source, about 2.5 million instructions
	for _, src := range []string{
		`'a'.matches('` + huge + `')`,
		`response.body.s.matches('(?:a?){1000}(?:a?){1000}(?:a?){1000}')`,
		`matches(response.body.s, '(?:(?:a?){30}){30}(?:(?:a?){30}){30}(?:(?:a?){30}){30}')`,
	} {
		for _, compile := range []func(string) error{
			func(s string) error { _, err := Compile(s); return err },
			func(s string) error { _, err := CompileValue(s); return err },
		} {
			if err := compile(src); !errors.Is(err, errPatternTooLarge) {
				t.Errorf("%.80s: compile = %v, want the pattern refused as too large", src, err)
			}
		}
	}
	if _, err := Compile(`'a'.matches('(')`); err == nil || !strings.Contains(err.Error(), "not a valid RE2 pattern") {
		t.Errorf("invalid pattern: compile = %v, want it refused", err)
	}
}

// Matching is priced by the program's size times the input's bytes: over a predicate's 4 KiB body a pattern of
// 2,003 instructions is admitted and one of 4,003 is refused; over an output's 256 KiB body the first is
// refused too, and so is '^[a-z0-9-]{1,63}$' (130 instructions), while '^[a-z0-9-]+$' passes in both.
func TestMatchesPricedByProgram(t *testing.T) {
	for _, tc := range []struct {
		src           string
		value, refuse bool
	}{
		{`response.body.s.matches('^[a-z0-9-]{1,63}$')`, false, false},
		{`response.body.s.matches('^[a-z0-9-]+$')`, true, false},
		{`response.body.s.matches('^[a-z0-9-]{1,63}$')`, true, true}, // 130 instructions over 256 KiB
		{`response.body.s.matches('(?:a?){1000}z')`, false, false},
		{`response.body.s.matches('(?:a?){1000}(?:a?){1000}z')`, false, true},
		{`response.body.s.matches('(?:a?){1000}z')`, true, true},
		{`response.body.l.exists(x, x.matches('(?:a?){100}z'))`, false, true},
	} {
		var err error
		if tc.value {
			_, err = CompileValue(tc.src)
		} else {
			_, err = Compile(tc.src)
		}
		if tc.refuse != errors.Is(err, ErrTooExpensive) || (!tc.refuse && err != nil) {
			t.Errorf("%s (value %v): compile = %v, want refused %v", tc.src, tc.value, err, tc.refuse)
		}
	}
}

// The CPU variant of row 1: a pattern over an input it does not match, with the compile-time estimate
// skipped, stops at the cost limit before matching (one call is never run past the budget), where cel-go ran
// it for seconds, out of reach of EvalTimeout.
func TestMatchesStoppedByCost(t *testing.T) {
	start := time.Now()
	err := uncheckedEval(t, `response.body.s.matches('(?:a?){1000}(?:a?){1000}z')`, true, stringBody(250_000))
	var ee *EvalError
	if !errors.As(err, &ee) || ee.Kind != kindCostLimit {
		t.Fatalf("evaluation error = %v, want the cost limit", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("stopped after %v, want well under EvalTimeout", d)
	}
	// Many calls each under the budget: the tracker charges each, and the evaluation stops once their sum
	// passes it.
	err = uncheckedEval(t, `response.body.l.exists(x, x.matches('(?:a?){100}z'))`, true,
		`{"l":[`+strings.TrimSuffix(strings.Repeat(`"`+strings.Repeat("a", 8000)+`",`, 30), ",")+`]}`)
	if !errors.As(err, &ee) || ee.Kind != kindCostLimit {
		t.Fatalf("evaluation error = %v, want the cost limit", err)
	}
}

// The runtime charge of matches is the estimate's rule over the actual input: 1, the traversal of both strings
// and the program's instructions times the input's bytes, regexStepsPerUnit steps a unit.
func TestMatchesActualCost(t *testing.T) {
	src := `response.body.s.matches('(?:a?){100}z')`
	p, err := Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	_, det, err := p.prg.ContextEval(context.Background(),
		map[string]any{VarResponse: activation(jsonResp(200, stringBody(1000)), PredicateSizes)})
	if err != nil {
		t.Fatal(err)
	}
	insts, err := regexInsts(`(?:a?){100}z`)
	if err != nil {
		t.Fatal(err)
	}
	if got, min := *det.ActualCost(), matchSteps(insts, 1000); got < min {
		t.Errorf("actual cost %d, want at least %d (%d instructions over 1,000 bytes)", got, min, insts)
	}
}

// The pattern is compiled once, with the program: an evaluation allocates nothing in proportion to the
// pattern's program (cel-go's own matches compiled it on every call).
func TestMatchesCompiledOnce(t *testing.T) {
	p, err := Compile(`response.body.s.matches('(?:a?){1000}b') || response.body.s.matches('(?:a?){100}c')`)
	if err != nil {
		t.Fatal(err)
	}
	r := jsonResp(200, stringBody(10))
	var before, after runtime.MemStats
	const n = 20
	runtime.ReadMemStats(&before)
	for range n {
		if _, err := p.Eval(r); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	// An evaluation allocates about 16 KB (the body parsed, the activation); compiling the two patterns on every
	// call, as cel-go's own matches does, about 320 KB.
	if perEval := (after.TotalAlloc - before.TotalAlloc) / n; perEval > 100<<10 {
		t.Errorf("%d bytes allocated per evaluation: the pattern is compiled per call", perEval)
	}
}

// BenchmarkRefusedPatterns measures what refusing row 1's shapes at compile costs (alloc-B/op, ns/op): the
// pattern built at evaluation, and a 16 KiB literal pattern, which is refused before its program is built.
func BenchmarkRefusedPatterns(b *testing.B) {
	for _, tc := range []struct{ name, src string }{
		{"row 1: a pattern built at evaluation (predicate)", row1},
		{"row 1: a 16 KiB literal pattern (output)",
			`response.body.s.matches('` + strings.Repeat("(?:a?){1000}", (MaxSourceLength-40)/12) + `')`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for b.Loop() {
				if _, err := CompileValue(tc.src); err == nil {
					b.Fatal("admitted")
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "alloc-B/op")
		})
	}
}
