package expr

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// bombs are the expressions of the tenancy issue (item 1, rows 1 and 2) and their kin: each must be refused
// at compile over its declared sizes, and stopped by the cost limit when evaluated anyway.
var bombs = []struct {
	name  string
	src   string
	value bool // an output value (ValueSizes) rather than a predicate (PredicateSizes)
	body  string
	// admitted: the compile-time estimate lets it through (cel-go's estimate of join ignores the length of the
	// strings joined); the guard before the call, or the check of a value's size before it is written out,
	// stops it at evaluation. A list of references to one string, cheap to build but long as text, was admitted
	// too; the bound on iterations (checkIterations) now refuses it, its second map's range not being known.
	admitted bool
}{
	{"17-fold map doubling over 4 KB", "[response.body.s]" + strings.Repeat(".map(x, x + x)", 17) + "[0].size() > 0",
		false, stringBody(4000), false},
	{"9-fold map doubling over 250 KB (output)", "[response.body.s]" + strings.Repeat(".map(x, x + x)", 9) + "[0]",
		true, stringBody(250_000), false},
	{"split('').exists over 250 KB (output)", `response.body.s.split('').exists(c, c == 'b')`, true, stringBody(250_000), false},
	{"list doubling l + l", "[[response.body.s]]" + strings.Repeat(".map(l, l + l)", 24) + "[0].join('').size() > 0",
		false, stringBody(4000), false},
	{"replace with an empty old string", `response.body.s.replace('', response.body.s) == ''`, false, stringBody(4000), false},
	{"replace over 250 KB (output)", `response.body.s.replace('a', response.body.s.substring(0, 1000))`, true,
		stringBody(250_000), false},
	{"join of a doubled list (output)", `[response.body.s, response.body.s, response.body.s, response.body.s]` +
		`.map(x, [x, x, x, x]).map(l, l.join('')).join('')`, true, stringBody(250_000), true},
	{"format of a doubled list (output)", `'%s'.format([[response.body.s, response.body.s].map(x, [x, x, x, x, x, x])])`,
		true, stringBody(250_000), false},
	{"a list holding one long string many times (output)", `[response.body.s].map(x, [x, x, x, x, x, x, x, x])[0]` +
		`.map(x, [x, x, x, x, x, x, x, x])`, true, stringBody(250_000), false},
	{"nested exists over 4 KB", `response.body.l.exists(x, response.body.l.exists(y, x == y + 1))`, false,
		`{"l":[` + strings.TrimSuffix(strings.Repeat("1,", 2000), ",") + `]}`, false},
}

func stringBody(n int) string { return `{"s":"` + strings.Repeat("a", n) + `"}` }

func TestBombsRefusedAtCompile(t *testing.T) {
	for _, b := range bombs {
		t.Run(b.name, func(t *testing.T) {
			var err error
			if b.value {
				_, err = CompileValue(b.src)
			} else {
				_, err = Compile(b.src)
			}
			if b.admitted {
				if err != nil {
					t.Fatalf("compile = %v; the estimate was known to admit it, update the table", err)
				}
				return
			}
			if !errors.Is(err, ErrTooExpensive) {
				t.Fatalf("compile = %v, want ErrTooExpensive", err)
			}
			if !strings.Contains(err.Error(), "over the budget of 1000000") &&
				!strings.Contains(err.Error(), "the work of comprehensions is bounded") {
				t.Errorf("error %q does not state the budget or the bound on iterations", err)
			}
		})
	}
}

// uncheckedEval evaluates src as Compile or CompileValue would build it, without the compile-time estimate:
// what happens if an expression slips past it.
func uncheckedEval(t testing.TB, src string, value bool, body string) error {
	t.Helper()
	return uncheckedEvalResp(t, src, value, jsonResp(200, body))
}

// uncheckedEvalResp is uncheckedEval over the response r.
func uncheckedEvalResp(t testing.TB, src string, value bool, r Response) error {
	t.Helper()
	e, err := env()
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	sizes := PredicateSizes
	if value {
		sizes = ValueSizes
	}
	regexes, err := regexPatterns(ast)
	if err != nil {
		regexes = nil // evaluated anyway: a pattern not compiled at admission
	}
	prg, err := e.Program(ast, programOptions(sizes, regexes)...)
	if err != nil {
		t.Fatal(err)
	}
	if value {
		_, err = (&ValueProgram{src: src, prg: prg}).EvalString(context.Background(), r)
	} else {
		_, err = (&Program{src: src, prg: prg}).Eval(r)
	}
	return err
}

func TestBombsStoppedByCost(t *testing.T) {
	for _, b := range bombs {
		t.Run(b.name, func(t *testing.T) {
			err := uncheckedEval(t, b.src, b.value, b.body)
			var ee *EvalError
			if !errors.As(err, &ee) || ee.Kind != kindCostLimit {
				t.Fatalf("evaluation error = %v, want the cost limit", err)
			}
		})
	}
}

func TestOrdinaryExpressionsPass(t *testing.T) {
	items := make([]string, 10_000)
	for i := range items {
		items[i] = `{"id":"` + strings.Repeat("a", 5) + `"}`
	}
	big := `{"id":"x-1","items":[` + strings.Join(items, ",") + `]}`
	small := `{"id":"x-1","state":"DONE","s":"` + strings.Repeat("a", 3000) + `","items":[{"id":"x"},{"id":"y"}]}`
	for _, tc := range []struct {
		src   string
		value bool
		body  string
	}{
		{`response.body.items.exists(i, i.id == "x")`, false, small},
		{`has(response.body.id)`, false, small},
		{`response.body.s.size() > 3 && response.body.state.lowerAscii() == "done"`, false, small},
		{`response.body.id == "x-1" && response.body.id.startsWith("x-")`, false, small},
		{`response.headers["content-type"].startsWith("application/json")`, false, small},
		{`response.body.s.split('').exists(c, c == 'b') || true`, false, small},
		{`response.body.id`, true, big},
		{`response.body.items[0].id`, true, big},
		{`response.body.items.size()`, true, big},
		{`response.body.id + "/" + response.body.items[1].id`, true, big},
	} {
		var err error
		if tc.value {
			var p *ValueProgram
			if p, err = CompileValue(tc.src); err == nil {
				_, err = p.EvalString(context.Background(), jsonResp(200, tc.body))
			}
		} else {
			var p *Program
			if p, err = Compile(tc.src); err == nil {
				_, err = p.Eval(jsonResp(200, tc.body))
			}
		}
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
		}
	}
	// exists over 10,000 items is refused as an output value only by its estimate over a 256 KiB body; it
	// evaluates within the limit at runtime.
	if err := uncheckedEval(t, `response.body.items.exists(i, i.id == "x") ? "y" : "n"`, true, big); err != nil {
		t.Errorf("exists over 10,000 items: %v", err)
	}
}

func TestHeaderBounds(t *testing.T) {
	h := map[string][]string{"X-Long": {strings.Repeat("v", 3*maxHeaderValueBytes)}}
	for i := range 2 * maxHeaders {
		h["X-H"+strings.Repeat("a", i)] = []string{"1"}
	}
	m := headerMap(h)
	if len(m) != maxHeaders {
		t.Errorf("headers seen = %d, want %d", len(m), maxHeaders)
	}
	if v, ok := m["x-long"]; ok && len(v) > maxHeaderValueBytes {
		t.Errorf("header value of %d bytes, want at most %d", len(v), maxHeaderValueBytes)
	}
}

// benchShape is an expression BenchmarkBombHeap evaluates, with the compile-time refusal skipped.
type benchShape struct {
	name, src string
	value     bool
	body      string
	header    http.Header // nil: jsonResp's
}

// BenchmarkBombHeap measures the heap one evaluation of each bomb (stopped) and of each matches shape grows to
// (TotalAlloc per op and the live heap after it, in bytes) and its time (ns/op, one goroutine: its CPU): the
// bounds docs/security.md states.
func BenchmarkBombHeap(b *testing.B) {
	shapes := make([]benchShape, 0, len(bombs)+len(matchShapes))
	for _, bomb := range bombs {
		shapes = append(shapes, benchShape{bomb.name, bomb.src, bomb.value, bomb.body, nil})
	}
	shapes = append(append(shapes, matchShapes...), iterationShapes...)
	for _, shape := range shapes {
		b.Run(shape.name, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for b.Loop() {
				r := jsonResp(200, shape.body)
				if shape.header != nil {
					r.Header = shape.header
				}
				_ = uncheckedEvalResp(b, shape.src, shape.value, r)
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "alloc-B/op")
			b.ReportMetric(float64(after.HeapInuse), "heap-inuse-B")
		})
	}
}
