// Package noisy is issue 40's noisy neighbour (item 6), shared by the real-cluster suite (test/cluster) and the
// benchmark (test/bench, part noisy): team-a's destinations (HTTP servers on 127.0.0.1 of the test's own
// process) and the shapes a tenant can send through the manager at their maximum, the shapes the manager must
// refuse at create, and team-b's measured actions, answered 201 and judged by `response.statusCode == 201`.
//
// The shapes are the rows a tenant reaches with its own namespace (ExternalActions, Destinations) and its
// own server:
//
//   - row 1: `matches` with a pattern built at evaluation, read from the response, too large or too expensive, in
//     successWhen, an output and a Destination's reconciliation.applied: refused at create (Refused); the most
//     expensive admitted ones instead (FiveSplits, WorstMatch, ComboWorst), evaluated over the largest inputs
//     they can see;
//   - row 2: a Destination that answers 200 `Content-Encoding: zstd` with half of a frame declaring an 8 MiB
//     window, then stalls, with as many actions as its maxInFlight; the same with brotli and a 16 MiB window;
//   - row 3: the evaluation slots kept full with those admitted expressions while team-b's answers wait to be
//     judged;
//   - row 5: a predicate body `{"s":"<4,088 bytes of 0xFF>"}` (each byte a U+FFFD when decoded);
//   - and a 15 MiB body trickled over seconds, with two 8 KiB headers that the worst admitted output reads.
package noisy

import (
	"errors"
	"strings"

	"github.com/actionledger/actionledger/internal/expr"
)

// The most expensive admitted expressions found (internal/expr: TestIterationsBounded, TestMatchesWorstAdmitted,
// BenchmarkBombHeap).
var (
	// FiveSplits is the worst admitted predicate by iterations: the body's string split into its characters,
	// five times over (7 ms over a 4 KiB string on the development machine with cel.dev/cel-go v0.33; 137 ms with
	// cel-go v0.29, whose cost tracker was quadratic).
	FiveSplits = strings.TrimSuffix(strings.Repeat(`response.body.s.split('').all(c, true) && `, 5), " && ")
	// WorstMatch is the worst admitted predicate `matches`: 2,423 instructions over a 4 KiB string it does not
	// match (62 ms).
	WorstMatch = `response.body.s.matches('(?:a?){1000}(?:a?){210}z')`
	// ComboWorst is the worst admitted output: a header value split into its 8,192 characters, then a
	// 1,003-instruction pattern over another header (52 ms; 166 ms with cel-go v0.29).
	ComboWorst = `response.headers['x-h'].split('').all(c, true) && !response.headers['x-hb'].matches('(?:a?){500}z')`
)

// row1 is issue 40 row 1's successWhen (172 bytes): a pattern built at evaluation.
var row1 = `'a'.matches(['(?:a?){1000}']` + strings.Repeat(".map(x, x + x)", 10) + `[0])`

// Where a refused expression is written.
const (
	FieldSuccessWhen = "spec.successWhen"
	FieldOutput      = `spec.outputs.values["v"]`
	FieldApplied     = "spec.reconciliation.applied"
)

// Shape is an expression team-a writes that the manager must refuse at create.
type Shape struct {
	Name  string
	Field string // FieldSuccessWhen, FieldOutput or FieldApplied
	Expr  string
}

// Refused are the shapes of row 1 (and the bounds found with it) that are refused before anything is sent.
var Refused = []Shape{
	{"a pattern built at evaluation (row 1)", FieldSuccessWhen, row1},
	{"a pattern read from the response", FieldSuccessWhen, `response.body.s.matches(response.body.p)`},
	{"a pattern of about 6,000 instructions", FieldSuccessWhen,
		`response.body.s.matches('(?:a?){1000}(?:a?){1000}(?:a?){1000}z')`},
	{"the worst admitted pattern, 10 repeats more", FieldSuccessWhen, strings.Replace(WorstMatch, "{210}", "{220}", 1)},
	{"six splits of the body", FieldSuccessWhen, FiveSplits + ` && response.body.s.split('').all(c, true)`},
	{"an output whose pattern is read from the response", FieldOutput, `response.body.s.matches(response.body.p)`},
	{"an output iterating a 256 KiB body's list", FieldOutput, `response.body.l.all(x, true)`},
	{"a post-check's applied with a pattern built at evaluation (row 1)", FieldApplied, row1},
}

// CompileError is the error the manager's compiler gives the shape (nil: admitted).
func (s Shape) CompileError() error {
	var err error
	if s.Field == FieldOutput {
		_, err = expr.CompileValue(s.Expr)
	} else {
		_, err = expr.Compile(s.Expr)
	}
	return err
}

// Message is what the refusal's message must contain: the field, then the start of the compiler's error (the
// status message may be truncated).
func (s Shape) Message() string {
	err := s.CompileError()
	if err == nil {
		return ""
	}
	msg := err.Error()
	if len(msg) > 60 {
		msg = msg[:60]
	}
	return s.Field + ": " + msg
}

// CheckShapes returns an error unless every Refused shape is refused and every admitted one is admitted by the
// compiler of this tree (a change of the bounds shows here first).
func CheckShapes() error {
	var errs []error
	for _, s := range Refused {
		if s.CompileError() == nil {
			errs = append(errs, errors.New("refused shape admitted: "+s.Name))
		}
	}
	for _, src := range []string{FiveSplits, WorstMatch} {
		if _, err := expr.Compile(src); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := expr.CompileValue(ComboWorst); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
