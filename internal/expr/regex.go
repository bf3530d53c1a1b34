package expr

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"
)

// How matches is bounded (issue 40 row 1; docs/security.md states the figures).
//
// cel-go compiles the pattern of matches on every call, and its cost rule charges the pattern by its length
// only, so a pattern built at evaluation ('(?:a?){1000}' doubled ten times) costs a few hundred MiB and seconds
// of CPU inside one call, out of reach of both the cost limit and EvalTimeout. So:
//
//   - The pattern must be a string literal: any other pattern argument is refused at compile (regexPatterns).
//   - The literal is parsed at compile and refused when its program would exceed maxRegexInsts instructions; the
//     size is bounded on the parsed tree before the program is built (at four times the cap), so a refused
//     pattern allocates nothing in proportion to its program.
//   - It is compiled once, with the program (cel.OptimizeRegex replaces every call whose pattern is a literal,
//     so every call): the standard library's implementation, which compiles the pattern on every call, is never
//     reached (TestMatchesCompiledOnce). Should a call reach it, CallCost charges it as the largest program.
//   - A call whose steps alone would pass CostLimit is refused before it runs (compiledMatch), as the guarded
//     calls are: one call never runs longer than the budget pays for.
//   - Matching is charged by the work of RE2's automaton, instructions × input bytes: regexStepsPerUnit steps
//     a unit, at compile over the declared input size and at evaluation over the actual input (matchCost).

const (
	// maxRegexInsts caps the program of a matches pattern, in regexp/syntax instructions. '^[a-z0-9-]{1,63}$'
	// is 131; the cap leaves room for any pattern a person writes and keeps one compiled program a few
	// hundred KiB at most.
	maxRegexInsts = 4096
	// regexStepsPerUnit is how many steps of the automaton (one instruction over one input byte) one cost unit
	// pays for: a step took 5 to 11 ns on the development machine (patterns of 5 to 4,003 instructions over
	// inputs they do not match; about 12 ns in BenchmarkBombHeap's worst admitted shape, compile included, on the
	// shared machine), so a unit is about 50 to 120 ns, cel-go's base unit being 50 ns.
	regexStepsPerUnit = 10
)

// errPatternNotLiteral and errPatternTooLarge are the compile errors of a matches pattern.
var (
	errPatternNotLiteral = errors.New("the pattern of matches must be a string literal (response.body.id.matches('^[a-z]+$')): " +
		"a pattern computed at evaluation cannot be priced or compiled once; write the pattern out")
	errPatternTooLarge = errors.New("the pattern of matches is too large")
)

// regexPatterns returns the pattern of every matches call in ast and the instruction count of its program,
// refusing a pattern that is not a string literal, is not a valid RE2 pattern, or exceeds maxRegexInsts.
func regexPatterns(ast *cel.Ast) (map[string]int, error) {
	patterns := map[string]int{}
	var errs []error
	celast.PreOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.CallKind || e.AsCall().FunctionName() != overloads.Matches {
			return
		}
		p, ok := patternArg(e.AsCall())
		if !ok {
			errs = append(errs, errPatternNotLiteral)
			return
		}
		if _, seen := patterns[p]; seen {
			return
		}
		n, err := regexInsts(p)
		if err != nil {
			errs = append(errs, err)
			return
		}
		patterns[p] = n
	}))
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return patterns, nil
}

// patternArg is the pattern of a matches call when it is a string literal.
func patternArg(c celast.CallExpr) (string, bool) {
	args := c.Args()
	i := 1
	if c.IsMemberFunction() {
		i = 0
	}
	if i >= len(args) || args[i].Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := args[i].AsLiteral().(types.String)
	return string(s), ok
}

// regexInsts is the instruction count of pattern's program as package regexp builds it, or an error for a
// pattern that is invalid or over maxRegexInsts. The size is bounded on the parsed tree first (treeInsts), so a
// repetition is never expanded past the cap.
func regexInsts(pattern string) (int, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("the pattern of matches is not a valid RE2 pattern: %w", err)
	}
	// The tree's bound is pessimistic (a star counted as two instructions where it may take one): a program is
	// built up to four times the cap, and the built program decides.
	if n := treeInsts(re, 4*maxRegexInsts) + progOverhead; n > 4*maxRegexInsts {
		return 0, fmt.Errorf("%w: its program would have more than %d instructions, the limit; repeat less "+
			"(x{1,63}, not (x{1,63}){100}) or match a smaller part of the response", errPatternTooLarge, maxRegexInsts)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, fmt.Errorf("the pattern of matches is not a valid RE2 pattern: %w", err)
	}
	if n := len(prog.Inst); n > maxRegexInsts {
		return 0, fmt.Errorf("%w: its program has %d instructions, over the limit of %d; repeat less "+
			"(x{1,63}, not (x{1,63}){100}) or match a smaller part of the response", errPatternTooLarge, n, maxRegexInsts)
	}
	return len(prog.Inst), nil
}

// progOverhead is what a program holds beside the pattern's own instructions: the fail instruction, the capture
// of the whole match (two) and the match.
const progOverhead = 4

// treeInsts bounds the program size of re as regexp/syntax's own size check (calcSize) does, pessimistically (a
// repetition counts its copies), saturating just past limit.
func treeInsts(re *syntax.Regexp, limit int) int {
	sat := func(n int) int { return min(n, limit+1) }
	var n int
	switch re.Op {
	case syntax.OpLiteral:
		n = len(re.Rune)
	case syntax.OpCapture, syntax.OpStar:
		n = 2 + treeInsts(re.Sub[0], limit)
	case syntax.OpPlus, syntax.OpQuest:
		n = 1 + treeInsts(re.Sub[0], limit)
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			n = sat(n + treeInsts(sub, limit))
		}
		if re.Op == syntax.OpAlternate {
			n += len(re.Sub) - 1
		}
	case syntax.OpRepeat:
		sub := treeInsts(re.Sub[0], limit)
		switch {
		case re.Max == -1 && re.Min == 0:
			n = 2 + sub // x*
		case re.Max == -1:
			n = 1 + sat(re.Min*sub) // xxx+
		default:
			n = sat(re.Max*sub) + re.Max - re.Min // x{2,5} = xx(x(x(x)?)?)?
		}
	}
	return sat(max(n, 1))
}

// matchSteps is the charge of matching a program of insts instructions over n input bytes, in units.
func matchSteps(insts int, n uint64) uint64 {
	return uint64(math.Ceil(float64(insts) * float64(n+1) / regexStepsPerUnit))
}

// matchCost is the runtime cost of a matches call (args: input, pattern): 1, the traversal of both strings, and
// the automaton's steps over the input. A pattern not compiled at admission (none reaches here) is charged as
// the largest program.
func (e *estimator) matchCost(args []ref.Val) *uint64 {
	if len(args) != 2 {
		return nil
	}
	in, _ := args[0].(types.String)
	p, _ := args[1].(types.String)
	insts, ok := e.regexes[string(p)]
	if !ok {
		insts = maxRegexInsts
	}
	c := 1 + uint64(math.Ceil(float64(len(in)+len(p))*traversalPerByte)) + matchSteps(insts, uint64(len(in)))
	return &c
}

// regexOptimization compiles the literal pattern of every matches call once, when the program is built, and
// checks each call before it runs: a call whose steps alone would pass CostLimit is the cost limit error, never
// run (the cost tracker charges a call only after it returns).
var regexOptimization = cel.OptimizeRegex(&interpreter.RegexOptimization{
	Function:   overloads.Matches,
	RegexIndex: 1,
	Factory:    compiledMatch,
})

// compiledMatch is call with pattern compiled once.
func compiledMatch(call interpreter.InterpretableCall, pattern string) (interpreter.InterpretableCall, error) {
	insts, err := regexInsts(pattern)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(values ...ref.Val) ref.Val {
		if len(values) != 2 {
			return types.NoSuchOverloadErr()
		}
		in, ok := values[0].(types.String)
		if !ok {
			return types.NoSuchOverloadErr()
		}
		if matchSteps(insts, uint64(len(in))) > CostLimit {
			return errMatchTooLong
		}
		return types.Bool(re.MatchString(string(in)))
	}), nil
}

// errMatchTooLong is the error of a matches call refused before it runs; its text is the cost limit's, so that it
// reads as one (evalError).
var errMatchTooLong = types.NewErr("operation cancelled: actual cost limit exceeded (matching over %d units)", CostLimit)
