package expr

import (
	"fmt"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// How iterations are bounded. cel-go's runtime cost tracker up to v0.29.2 kept a stack of the values an
// evaluation had produced; a comprehension (all, exists, exists_one, map, filter) left a value or two on it at
// each iteration, and at each iteration searched it from the top for values it did not hold. So one comprehension
// of n iterations took time quadratic in n (0.15 s for 10,000, 0.5 s for 20,000, past EvalTimeout for 40,000),
// whatever the cost the budget charged for its steps: all(x, true) over a 131,000-element list, estimated at
// 786,435, ran until EvalTimeout. The estimate cannot see that, so the work is bounded at compile apart from it:
// each comprehension's iterations (rangeBound, over the declared sizes) times the depth the stack can reach
// during them (its own iterations plus those of the comprehensions around it), times the iterations of the
// comprehensions around it, summed over the expression, at most maxIterationWork. cel.dev/cel-go v0.33's tracker
// has no such stack (the same all(x, true) takes 48 ms), and the bound is kept as it was: what it admits and
// refuses does not change with the module, and it holds the work of one evaluation far below EvalTimeout.

// maxIterationWork bounds the work over the comprehensions of one expression: 10,000 iterations of one
// comprehension (0.15 s with cel-go v0.29's tracker, a few ms with cel.dev/cel-go v0.33's), or fewer over several. Over a predicate's 4 KiB body a comprehension over a list from
// the response (2,048 elements at most) takes 4 million, so 23 of them pass; over an output's 256 KiB body
// one over the body's lists (131,072 elements) is refused.
const maxIterationWork = 10_000 * 10_000

// checkIterations refuses ast when its comprehensions' work (maxIterationWork) over sizes can exceed
// maxIterationWork (ErrTooExpensive).
func checkIterations(ast *cel.Ast, sizes Sizes) error {
	var widest uint64
	work := iterationWork(ast.NativeRep().Expr(), sizes, 1, 0, &widest)
	if work > maxIterationWork {
		return fmt.Errorf("%w: it iterates (all, exists, exists_one, map or filter) over lists or maps that can hold up "+
			"to %d elements over a response body of up to %d bytes; the work of comprehensions is bounded at about %d "+
			"iterations of one comprehension, fewer over several or nested; read the values by path (response.body.items[0].id), or decide over the %d-byte body of "+
			"successWhen", ErrTooExpensive, widest, sizes.BodyBytes, 10_000, PredicateSizes.BodyBytes)
	}
	return nil
}

// iterationWork is the work of the comprehensions in e (see above), each run times times (the iterations of the
// comprehensions around it), over a stack already depth deep; widest is set to the largest range seen.
func iterationWork(e celast.Expr, sizes Sizes, times, depth uint64, widest *uint64) uint64 {
	sat := func(a, b uint64) uint64 { // a*b, saturating past maxIterationWork
		if a != 0 && b > (maxIterationWork+1)/a {
			return maxIterationWork + 1
		}
		return a * b
	}
	var work uint64
	add := func(w uint64) { work = min(work+w, maxIterationWork+1) }
	switch e.Kind() {
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		n := rangeBound(c.IterRange(), sizes)
		*widest = max(*widest, n)
		add(iterationWork(c.IterRange(), sizes, times, depth, widest))
		add(iterationWork(c.AccuInit(), sizes, times, depth, widest))
		add(sat(sat(times, n), depth+n))
		for _, x := range []celast.Expr{c.LoopCondition(), c.LoopStep()} {
			add(iterationWork(x, sizes, sat(times, n), depth+n, widest))
		}
		add(iterationWork(c.Result(), sizes, times, depth, widest))
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() {
			add(iterationWork(c.Target(), sizes, times, depth, widest))
		}
		for _, a := range c.Args() {
			add(iterationWork(a, sizes, times, depth, widest))
		}
	case celast.SelectKind:
		add(iterationWork(e.AsSelect().Operand(), sizes, times, depth, widest))
	case celast.ListKind:
		for _, x := range e.AsList().Elements() {
			add(iterationWork(x, sizes, times, depth, widest))
		}
	case celast.MapKind:
		for _, x := range e.AsMap().Entries() {
			m := x.AsMapEntry()
			add(iterationWork(m.Key(), sizes, times, depth, widest))
			add(iterationWork(m.Value(), sizes, times, depth, widest))
		}
	case celast.StructKind:
		for _, x := range e.AsStruct().Fields() {
			add(iterationWork(x.AsStructField().Value(), sizes, times, depth, widest))
		}
	}
	return work
}

// rangeBound bounds the elements of the list or map e evaluates to, over sizes: a literal by its elements, a
// value from the response as EstimateSize does (a list or map in the body by half the body's bytes, the headers
// by maxHeaders), split by the bytes of its string, a concatenation by the sum, map and filter by their range,
// anything else by half the body's bytes.
func rangeBound(e celast.Expr, sizes Sizes) uint64 {
	half := uint64(max(sizes.BodyBytes, 0)) / 2
	switch e.Kind() {
	case celast.ListKind:
		return uint64(len(e.AsList().Elements()))
	case celast.MapKind:
		return uint64(max(e.AsMap().Size(), 0))
	case celast.ComprehensionKind:
		return rangeBound(e.AsComprehension().IterRange(), sizes)
	case celast.CallKind:
		c := e.AsCall()
		switch {
		case c.FunctionName() == operators.Add && len(c.Args()) == 2:
			return rangeBound(c.Args()[0], sizes) + rangeBound(c.Args()[1], sizes)
		case c.FunctionName() == "split" && c.IsMemberFunction():
			return stringBound(c.Target(), sizes)
		}
	}
	if p, ok := responsePath(e); ok {
		switch {
		case len(p) == 1:
			return 3
		case p[1] == fieldHeaders && len(p) == 2:
			return maxHeaders
		}
	}
	return half
}

// stringBound bounds the bytes of the string e evaluates to: a literal by its length, a header value by
// maxHeaderValueBytes, anything else by the body's bytes.
func stringBound(e celast.Expr, sizes Sizes) uint64 {
	if e.Kind() == celast.LiteralKind {
		if s, ok := e.AsLiteral().(types.String); ok {
			return uint64(len(s))
		}
	}
	if p, ok := responsePath(e); ok && len(p) == 3 && p[1] == fieldHeaders {
		return maxHeaderValueBytes
	}
	return uint64(max(sizes.BodyBytes, 0))
}

// responsePath is the path of e when it is the response variable, or a chain of field selections and indexes by
// literal keys from it (response.headers["etag"] is [response headers etag]).
func responsePath(e celast.Expr) ([]string, bool) {
	switch e.Kind() {
	case celast.IdentKind:
		if e.AsIdent() == VarResponse {
			return []string{VarResponse}, true
		}
	case celast.SelectKind:
		s := e.AsSelect()
		if s.IsTestOnly() {
			return nil, false
		}
		if p, ok := responsePath(s.Operand()); ok {
			return append(p, s.FieldName()), true
		}
	case celast.CallKind:
		c := e.AsCall()
		if c.FunctionName() == "_[_]" && len(c.Args()) == 2 && c.Args()[1].Kind() == celast.LiteralKind {
			if p, ok := responsePath(c.Args()[0]); ok {
				return append(p, fmt.Sprint(c.Args()[1].AsLiteral().Value())), true
			}
		}
	}
	return nil, false
}
