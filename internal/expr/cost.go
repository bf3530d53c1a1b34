package expr

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	celcost "cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/decls"
	"cel.dev/cel-go/common/functions"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
)

// How an expression is bounded (docs/security.md states the figures).
//
// One cost model serves both checks. A call costs 1, plus a traversal charge for what it reads (a tenth of a
// unit per byte of a string or bytes argument, a unit per element of a list or map argument) and an allocation
// charge for what it produces (a unit per byte of a new string or bytes value, elementCost units per element of
// a new list or map, plus the bytes of the strings it holds). Reading a variable or field costs 1, as in cel-go.
// So CostLimit units bound the bytes an evaluation allocates, not only its steps.
//
//   - At compile: the cost of the expression is estimated (cel-go's checker) over the declared input sizes
//     (Sizes): an expression whose worst case exceeds CostLimit is refused before anything is sent.
//   - At evaluation: the same model is charged as the expression runs, and the evaluation stops with the cost
//     limit error once it passes CostLimit. A call whose single result could be far larger than its inputs
//     (replace, join, format) is checked before it runs and refused past maxStringBytes.
//   - At most maxConcurrentEvals evaluations run at once in the process, so the heap held by evaluations is
//     bounded by maxConcurrentEvals times the bound of one.

const (
	// elementCost is the allocation charge of one element of a list or map a call produces: the slot and the
	// boxed value, in bytes.
	elementCost = 16
	// traversalPerByte is the traversal charge of one byte of a string or bytes argument (cel-go's own).
	traversalPerByte = celcost.StringTraversalCostFactor
	// maxStringBytes caps the result of a call whose output can be much larger than its inputs (replace, join,
	// format): the call is refused before it allocates. A larger result would pass CostLimit anyway.
	maxStringBytes = CostLimit
	// scalarTextBytes bounds the text of a number, bool, duration or timestamp (string(x)).
	scalarTextBytes = 40
	// maxHeaders and maxHeaderValueBytes bound what response.headers holds: the first maxHeaders header names
	// in sorted order, each value cut to maxHeaderValueBytes, names longer than maxHeaderNameBytes left out.
	maxHeaders          = 64
	maxHeaderValueBytes = 8 << 10
	maxHeaderNameBytes  = actionsv1alpha1.MaxHeaderNameLength
)

// Sizes declares the input of an expression: the response body it can see, in bytes. The headers are bounded
// by maxHeaders, maxHeaderNameBytes and maxHeaderValueBytes whatever the body.
type Sizes struct {
	// BodyBytes is the largest response body the expression sees; a longer body is cut to it.
	BodyBytes int
}

var (
	// PredicateSizes are the inputs of successWhen and of a post-check's applied and notApplied: the body
	// as status keeps it (MaxResponseBodyLength, 4 KiB).
	PredicateSizes = Sizes{BodyBytes: actionsv1alpha1.MaxResponseBodyLength}
	// ValueSizes are the inputs of an output value (spec.outputs.values): the body up to MaxOutputResponseBytes
	// (256 KiB).
	ValueSizes = Sizes{BodyBytes: actionsv1alpha1.MaxOutputResponseBytes}
)

// ErrTooExpensive marks an expression refused at compile because its estimated cost exceeds CostLimit.
var ErrTooExpensive = errors.New("expression is too expensive")

// checkCost returns the estimated worst-case cost of checked over sizes (cost units), and refuses it when that
// exceeds CostLimit.
func checkCost(e *cel.Env, checked *cel.Ast, sizes Sizes, regexes map[string]int) (uint64, error) {
	est, err := e.EstimateCost(checked, &estimator{sizes: sizes, regexes: regexes})
	if err != nil {
		return 0, fmt.Errorf("estimating the cost of the expression: %w", err)
	}
	if est.Max > CostLimit {
		return 0, fmt.Errorf("%w: its estimated cost over a response body of up to %d bytes and headers of up to %d "+
			"values of %d bytes is %s, over the budget of %d; iterate over smaller parts of the response, and avoid "+
			"building strings or lists that grow with each step", ErrTooExpensive, sizes.BodyBytes, maxHeaders,
			maxHeaderValueBytes, costText(est.Max), CostLimit)
	}
	return est.Max, nil
}

// costText writes an estimate for users ("more than 10^18" for an unbounded one).
func costText(c uint64) string {
	if c >= math.MaxUint64/2 {
		return "unbounded"
	}
	return fmt.Sprint(c)
}

// estimator is the static side of the cost model: the declared sizes of the response and the cost and result
// size of the calls whose cost depends on their output.
type estimator struct {
	sizes Sizes
	// regexes holds the instruction count of the program of each matches pattern of the expression
	// (regexPatterns).
	regexes map[string]int
}

// EstimateSize bounds the size of every value reachable from the response variable: the body and anything in
// it by the body's size in bytes (a string in it is at most that long, since the body is valid UTF-8 before it
// is decoded, boundBody; a list holds at most half as many elements, but a path does not say whether it leads
// to a list or a string, so both are bounded by the longer), the headers by maxHeaders entries of
// maxHeaderValueBytes.
func (e *estimator) EstimateSize(n celcost.AstNode) *celcost.SizeEstimate {
	if t := n.Type(); t != nil && t.Kind() == types.TypeKind {
		return &celcost.SizeEstimate{Min: 1, Max: 1} // a type value (type(x) == int)
	}
	p := n.Path()
	if len(p) == 0 || p[0] != VarResponse {
		return nil
	}
	b := uint64(max(e.sizes.BodyBytes, 0))
	var max uint64
	switch {
	case len(p) == 1:
		max = 3
	case p[1] == fieldBody:
		max = b
	case p[1] == fieldHeaders && len(p) == 2:
		max = maxHeaders
	case p[1] == fieldHeaders:
		max = maxHeaderValueBytes
	default:
		max = 1 // statusCode
	}
	return &celcost.SizeEstimate{Min: 0, Max: max}
}

// EstimateCallCost gives the cost and result size of string concatenation (its bytes, as CallCost charges
// them) and format (up to maxStringBytes); nil leaves a call to cel-go's estimate, which for the strings
// extension charges each result by its size.
func (e *estimator) EstimateCallCost(function, overloadID string, target *celcost.AstNode,
	args []celcost.AstNode) *celcost.CallEstimate {
	in := make([]celcost.AstNode, 0, len(args)+1)
	if target != nil {
		in = append(in, *target)
	}
	in = append(in, args...)
	size := func(i int) celcost.SizeEstimate {
		if i < len(in) {
			if s := in[i].ComputedSize(); s != nil {
				return *s
			}
		}
		return celcost.UnknownSizeEstimate()
	}
	traverse := func(idx ...int) celcost.Estimate {
		var c celcost.Estimate
		for _, i := range idx {
			c = c.Add(size(i).MultiplyByCostFactor(traversalPerByte))
		}
		return c.Add(celcost.FixedCostEstimate(1))
	}
	result := func(cost celcost.Estimate, s celcost.SizeEstimate, perUnit float64) *celcost.CallEstimate {
		return &celcost.CallEstimate{CostEstimate: cost.Add(s.MultiplyByCostFactor(perUnit)), ResultSize: &s}
	}
	switch overloadID {
	case overloads.Matches, overloads.MatchesString:
		// The pattern is a literal (regexPatterns): its program's size times the input's declared bytes.
		insts := maxRegexInsts
		if len(in) == 2 {
			if x := in[1].Expr(); x.Kind() == ast.LiteralKind {
				if l, ok := x.AsLiteral().(types.String); ok {
					if n, ok := e.regexes[string(l)]; ok {
						insts = n
					}
				}
			}
		}
		s := size(0)
		return &celcost.CallEstimate{CostEstimate: traverse(0, 1).Add(celcost.Estimate{
			Min: matchSteps(insts, s.Min), Max: matchSteps(insts, s.Max)})}
	case "add_string", "add_bytes":
		return result(traverse(0, 1), size(0).Add(size(1)), 1)
	case "string_to_bool", "string_to_double", "string_to_duration", "string_to_int64", "string_to_timestamp",
		"string_to_uint64":
		// A string parsed: its traversal, as CallCost charges it (cel-go's rule charges 1).
		return &celcost.CallEstimate{CostEstimate: traverse(0)}
	case "string_to_bytes", "bytes_to_string", "string_to_string", "bytes_to_bytes":
		// The same bytes, charged as a new value (CallCost charges a bytes result, and a string that is not
		// its argument, by its length).
		return result(traverse(0), size(0), 1)
	case "strings_quote":
		// Each character escaped in two bytes, or an invalid byte made U+FFFD (three), and the quotes.
		return result(traverse(0), celcost.SizeEstimate{Min: size(0).Min + 2, Max: 3*size(0).Max + 2}, 1)
	case "bool_to_string", "double_to_string", "duration_to_string", "int64_to_string", "timestamp_to_string",
		"uint64_to_string":
		// A number, duration or timestamp written out: at most scalarTextBytes.
		return result(traverse(0), celcost.SizeEstimate{Min: 1, Max: scalarTextBytes}, 1)
	case overloadStringFormat:
		// Refused at evaluation past maxStringBytes (guarded); the strings extension's own estimators cover
		// its other calls (split, replace, join, ...) with their result sizes.
		return result(traverse(0, 1), celcost.SizeEstimate{Max: maxStringBytes}, 1)
	}
	return nil
}

// CallCost is the runtime side of the cost model (cost.ActualCostEstimator): 1, plus the traversal of
// the arguments, plus the allocation of the result. An operand that is the comprehension's accumulator (a
// list being built in place) is not charged again: only what a step adds to it is.
func (e *estimator) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	if !priced(function, overloadID) {
		// Never reached: TestEveryOverloadHasAPrice, and unpricedCall at compile.
		c := uint64(CostLimit + 1)
		return &c
	}
	if function == overloads.Matches {
		return e.matchCost(args)
	}
	if c, ok := compareCost(function, args); ok {
		return &c
	}
	var read, alloc uint64
	for _, a := range args {
		switch function {
		case operators.Add:
			// A list concatenation is a view of its operands: charged below by what it adds.
			if isList(a) {
				continue
			}
		case "size":
			continue
		}
		read += traversal(a)
	}
	switch {
	case function == operators.Add && isList(result):
		if len(args) == 2 {
			alloc = elementCost * sizeOf(args[1])
		}
	default:
		alloc = allocation(result, args)
	}
	c := 1 + uint64(math.Ceil(float64(read)*traversalPerByte)) + alloc
	return &c
}

// compareCost is the runtime cost of the calls of the read rule whose estimate (cel-go's rule for the overload)
// charges less than reading every argument, as that estimate charges them: a comparison 0.1 per byte or element
// of the shorter operand (it stops there: lengths differ, or the first difference), startsWith and endsWith
// 0.1 per byte of the prefix or suffix. Charging more here than the estimate would let an admitted expression
// reach the cost limit on a legal response (TestCallsChargedAsEstimated).
func compareCost(function string, args []ref.Val) (uint64, bool) {
	var n uint64
	switch function {
	case "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_":
		if len(args) != 2 {
			return 0, false
		}
		n = min(compareSize(args[0]), compareSize(args[1]))
	case "startsWith", "endsWith":
		if len(args) != 2 {
			return 0, false
		}
		n = compareSize(args[1])
	default:
		return 0, false
	}
	return 1 + uint64(math.Ceil(float64(n)*traversalPerByte)), true
}

// compareSize is v's size as cel-go's comparison estimate counts it: the bytes of a string or bytes value, the
// elements of a list or map, 1 otherwise.
func compareSize(v ref.Val) uint64 {
	switch t := v.(type) {
	case types.String:
		return uint64(len(t))
	case types.Bytes:
		return uint64(len(t))
	case traits.Lister, traits.Mapper:
		return sizeOf(v)
	}
	return 1
}

// traversal is what reading v costs before the per-byte factor: the bytes of a string, ten per element of
// a list or map (one unit each).
func traversal(v ref.Val) uint64 {
	switch t := v.(type) {
	case types.String:
		return uint64(len(t))
	case types.Bytes:
		return uint64(len(t))
	case traits.Lister, traits.Mapper:
		return sizeOf(v) * uint64(1/traversalPerByte)
	}
	return 0
}

func isList(v ref.Val) bool {
	_, ok := v.(traits.Lister)
	return ok
}

// sizeOf is v's size() for lists and maps, 0 otherwise.
func sizeOf(v ref.Val) uint64 {
	if s, ok := v.(traits.Sizer); ok {
		if n, ok := s.Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 0
}

// allocation is what producing result costs: its bytes for a new string or bytes value (nothing when it is
// one of the arguments), elementCost per element of a list or map plus the bytes of the strings in a list.
func allocation(result ref.Val, args []ref.Val) uint64 {
	switch t := result.(type) {
	case types.String:
		for _, a := range args {
			// The same bytes (a field read through a call, orValue): nothing new is allocated.
			if s, ok := a.(types.String); ok && len(s) == len(t) &&
				unsafe.StringData(string(s)) == unsafe.StringData(string(t)) { //nolint:gosec // G103: compares pointers only

				return 0
			}
		}
		return uint64(len(t))
	case types.Bytes:
		return uint64(len(t))
	case traits.Lister:
		n := sizeOf(t)
		c := elementCost * n
		for i := range min(n, maxStringBytes) {
			if s, ok := t.Get(types.Int(i)).(types.String); ok { //nolint:gosec // G115: i < maxStringBytes
				c += uint64(len(s))
			}
		}
		return c
	case traits.Mapper:
		return elementCost * sizeOf(t)
	}
	return 0
}

// splitOverloads are the strings extension's split overloads: charged elementCost per element they produce
// (the extension charges one), statically and at evaluation.
var splitOverloads = []string{"string_split_string", "string_split_string_int"}

// splitEstimate is the static cost of split: the traversal of the string and up to one element per byte.
func splitEstimate(_ celcost.Estimator, target *celcost.AstNode, _ []celcost.AstNode) *celcost.CallEstimate {
	if target == nil {
		return nil
	}
	s := celcost.UnknownSizeEstimate()
	if sz := (*target).ComputedSize(); sz != nil {
		s = *sz
	}
	n := celcost.SizeEstimate{Min: 0, Max: s.Max}
	cost := celcost.FixedCostEstimate(1).Add(s.MultiplyByCostFactor(traversalPerByte)).
		Add(n.MultiplyByCostFactor(elementCost + 1))
	return &celcost.CallEstimate{CostEstimate: cost, ResultSize: &n}
}

// splitCost is the runtime cost of split, as splitEstimate.
func splitCost(args []ref.Val, result ref.Val) *uint64 {
	c := 1 + uint64(math.Ceil(float64(traversal(args[0]))*traversalPerByte)) + allocation(result, args)
	return &c
}

// costEnvOptions are the static side of the split charge.
func costEnvOptions() []cel.EnvOption {
	opts := make([]celcost.Option, 0, len(splitOverloads))
	for _, id := range splitOverloads {
		opts = append(opts, celcost.OverloadCostEstimate(id, splitEstimate))
	}
	return []cel.EnvOption{cel.CostEstimatorOptions(opts...)}
}

// costTrackerOptions are the runtime side of the split charge.
func costTrackerOptions() []celcost.TrackerOption {
	opts := make([]celcost.TrackerOption, 0, len(splitOverloads))
	for _, id := range splitOverloads {
		opts = append(opts, celcost.OverloadTracker(id, splitCost))
	}
	return opts
}

// guarded are the calls whose result can be much larger than their inputs: each is checked before it runs
// (resultBound) and refused with the cost limit error past maxStringBytes.
var guarded = map[string]func(args []ref.Val) uint64{
	"string_replace_string_string": func(a []ref.Val) uint64 {
		return replaceBound(a[0], a[1], a[2], -1)
	},
	"string_replace_string_string_int": func(a []ref.Val) uint64 {
		n, _ := a[3].(types.Int)
		return replaceBound(a[0], a[1], a[2], int64(n))
	},
	"list_join":        func(a []ref.Val) uint64 { return joinBound(a[0], types.String("")) },
	"list_join_string": func(a []ref.Val) uint64 { return joinBound(a[0], a[1]) },
	overloadStringFormat: func(a []ref.Val) uint64 {
		s, _ := a[0].(types.String)
		return 2*uint64(len(s)) + valueBound(a[1], maxStringBytes)
	},
}

// replaceBound is the length of str.replace(old, new[, n]).
func replaceBound(str, old, repl ref.Val, n int64) uint64 {
	s, _ := str.(types.String)
	o, _ := old.(types.String)
	r, _ := repl.(types.String)
	var count uint64
	if len(o) == 0 {
		count = uint64(len([]rune(string(s)))) + 1
	} else {
		for rest := string(s); ; {
			i := indexOf(rest, string(o))
			if i < 0 {
				break
			}
			count++
			rest = rest[i+len(o):]
		}
	}
	if n >= 0 && uint64(n) < count {
		count = uint64(n)
	}
	if len(r) <= len(o) {
		return uint64(len(s))
	}
	return uint64(len(s)) + count*uint64(len(r)-len(o)) //nolint:gosec // G115: len(r) > len(o)
}

// joinBound is the length of list.join(sep), counted up to maxStringBytes.
func joinBound(list, sep ref.Val) uint64 {
	l, ok := list.(traits.Lister)
	if !ok {
		return 0
	}
	d, _ := sep.(types.String)
	n := sizeOf(l)
	total := n * uint64(len(d))
	for i := uint64(0); i < n && total <= maxStringBytes; i++ {
		if s, ok := l.Get(types.Int(i)).(types.String); ok { //nolint:gosec // G115: i < size, an int
			total += uint64(len(s))
		}
	}
	return total
}

// valueBound bounds the length of v written by format (%s of a list or map writes its elements), counted up
// to limit.
func valueBound(v ref.Val, limit uint64) uint64 {
	switch t := v.(type) {
	case types.String:
		return uint64(len(t))
	case types.Bytes:
		return 4 * uint64(len(t))
	case traits.Lister:
		n := sizeOf(t)
		total := 2 + 2*n
		for i := uint64(0); i < n && total <= limit; i++ {
			total += valueBound(t.Get(types.Int(i)), limit-total) //nolint:gosec // G115: i < size, an int
		}
		return total
	case traits.Mapper:
		total := 2 + 4*sizeOf(t)
		for it := t.Iterator(); it.HasNext() == types.True && total <= limit; {
			k := it.Next()
			total += valueBound(k, limit-total)
			if total <= limit {
				total += valueBound(t.Get(k), limit-total)
			}
		}
		return total
	}
	return 32 // a number, bool, null, timestamp or duration
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// guardedOverloads rebinds the guarded overloads of e (the strings extension's) so that each checks its result
// size before it runs.
func guardedOverloads(e *cel.Env) ([]cel.EnvOption, error) {
	var opts []cel.EnvOption
	for name, fn := range e.Functions() {
		bindings, err := fn.Bindings()
		if err != nil {
			return nil, fmt.Errorf("reading the overloads of %s: %w", name, err)
		}
		for _, b := range bindings {
			bound, ok := guarded[b.Operator]
			if !ok {
				continue
			}
			opts = append(opts, cel.Function(name, guardedOverload(fn.OverloadDecls(), b, bound)))
		}
	}
	return opts, nil
}

// errTooLarge is the error of a guarded call refused before it runs; its text is the cost limit's, so that it
// reads as one (evalError).
var errTooLarge = types.NewErr("operation cancelled: actual cost limit exceeded (a result over %d bytes)", maxStringBytes)

// guardedOverload is the overload of b, with its declaration from decls, checking bound first.
func guardedOverload(decl []*decls.OverloadDecl, b *functions.Overload, bound func([]ref.Val) uint64) cel.FunctionOpt {
	impl := func(args ...ref.Val) ref.Val {
		if bound(args) > maxStringBytes {
			return errTooLarge
		}
		switch {
		case b.Function != nil:
			return b.Function(args...)
		case b.Binary != nil && len(args) == 2:
			return b.Binary(args[0], args[1])
		case b.Unary != nil && len(args) == 1:
			return b.Unary(args[0])
		}
		return types.NewErr("no implementation of %s", b.Operator)
	}
	for _, d := range decl {
		if d.ID() != b.Operator {
			continue
		}
		argTypes := d.ArgTypes()
		if d.IsMemberFunction() {
			return cel.MemberOverload(d.ID(), argTypes, d.ResultType(), cel.FunctionBinding(impl))
		}
		return cel.Overload(d.ID(), argTypes, d.ResultType(), cel.FunctionBinding(impl))
	}
	return func(f *decls.FunctionDecl) (*decls.FunctionDecl, error) { return f, nil }
}

// overloadStringFormat is the overload id of the strings extension's format.
const overloadStringFormat = "string_format"
