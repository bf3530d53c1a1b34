// Package expr compiles and evaluates CEL predicates over an HTTP response.
//
// Predicates are used for ExternalAction.spec.successWhen and for a
// destination's post-check expressions (applied, notApplied). An expression
// sees a single variable, response, a map with the keys:
//
//   - statusCode: int, the HTTP status code.
//   - headers: map(string, string), header names lower-cased, multiple
//     values of one header joined with ", ".
//   - body: dyn, the parsed JSON value when the body is valid JSON, otherwise
//     the body as a string. Invalid UTF-8 is replaced first (each run of
//     invalid bytes by one U+FFFD), then the body is cut to its declared
//     size, so no string in it is longer than that size.
//
// JSON integers that fit in an int64 are exposed as CEL int, other numbers as
// double, so that both response.body.count == 3 and response.body.count + 1
// behave as users expect.
//
// The environment has the CEL standard library, optional types
// (response.body.?id.orValue(""), response.headers[?"etag"]) and the strings
// extension (lowerAscii, split, trim, ...). It offers no I/O. Every function
// has a price in the cost model (prices.go); the pattern of matches must be a
// string literal, compiled once (regex.go). Evaluation is bounded by a cost
// limit and a wall-clock timeout.
package expr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	// VarResponse is the name of the variable holding the response.
	VarResponse = "response"

	// CostLimit is the budget of one expression, in cost units (cost.go: one
	// per step, plus one per byte a call allocates): refused at compile when
	// its estimate over the declared sizes is larger, stopped at evaluation
	// when it passes it. It matches the per-expression limit Kubernetes uses.
	CostLimit = 1_000_000

	// EvalTimeout bounds the wall-clock time of one evaluation. It backs up
	// the cost limit: with cost tracking on, cel-go v0.29.2 spends time
	// quadratic in the number of comprehension iterations (about 0.3s for
	// exists() over a 10,000-element list), so very large lists can time
	// out before reaching the cost limit.
	EvalTimeout = 2 * time.Second

	// SlotWait bounds the wait for an evaluation slot (slots.go), apart from EvalTimeout, which starts once the
	// slot is taken: a wait behind other evaluations never eats the evaluation's own time. It is longer than one
	// EvalTimeout, so that with the slots served fairly over namespaces a tenant whose expressions fill every
	// slot delays another's next evaluation by about one evaluation, within SlotWait. An evaluation that does not
	// get a slot in time did not finish (Unfinished): it decides nothing (DESIGN rule 12).
	SlotWait = EvalTimeout + time.Second

	// MaxSourceLength is the maximum length of an expression, in bytes.
	MaxSourceLength = 16 * 1024

	// interruptCheckFrequency is the number of comprehension iterations
	// between checks of the evaluation context.
	interruptCheckFrequency = 100
)

// Fields of the response variable.
const (
	fieldHeaders = "headers"
	fieldBody    = "body"
)

// Response is the input of a predicate.
type Response struct {
	// StatusCode is the HTTP status code.
	StatusCode int
	// Header holds the response headers.
	Header http.Header
	// Body is the response body. It is used as given: callers cap its size.
	Body []byte
}

// Program is a compiled boolean predicate. Safe for concurrent use.
type Program struct {
	src string
	prg cel.Program
	// quick: it runs without an evaluation slot (QuickCost).
	quick bool
}

// Source returns the expression the program was compiled from.
func (p *Program) Source() string { return p.src }

var env = sync.OnceValues(func() (*cel.Env, error) {
	base, err := cel.NewEnv(
		cel.Variable(VarResponse, cel.MapType(cel.StringType, cel.DynType)),
		// Version 2: the optional functions every price in prices.go was set for. Version 3 adds
		// hasValue(value), which has none; a new version of a library is priced before it is let in.
		cel.OptionalTypes(cel.OptionalTypesVersion(2)),
		ext.Strings(),
		cel.CrossTypeNumericComparisons(true),
		// The cost rules this package's estimator, prices and tests were built on (cel-go v0.29). cel.dev/cel-go
		// v0.33's version 1 estimates a join by the product of the list's length and its longest element: 16.8
		// million for joining a 4 KiB body's list, refusing expressions that run in microseconds. What the legacy
		// rules miss is charged here anyway: guardedOverloads bounds join, replace and format before they run,
		// and the runtime cost limit (CostLimit) stops any evaluation that exceeds it. The module moved for its
		// runtime cost tracker: cel-go v0.29's searched a stack on every pop, and took 40 % of the manager's CPU
		// beside the noisy neighbour (docs/security.md).
		cel.CostModelVersion(0),
	)
	if err != nil {
		return nil, err
	}
	guards, err := guardedOverloads(base)
	if err != nil {
		return nil, err
	}
	return base.Extend(append(guards, costEnvOptions()...)...)
})

// programOptions are the options of every program: the patterns of matches compiled once (regexes holds
// their program sizes), the cost model charged at evaluation (CallCost) under CostLimit.
func programOptions(sizes Sizes, regexes map[string]int) []cel.ProgramOption {
	return []cel.ProgramOption{
		regexOptimization,
		cel.CostTracking(&estimator{sizes: sizes, regexes: regexes}),
		cel.CostTrackerOptions(costTrackerOptions()...),
		cel.CostLimit(CostLimit),
		cel.InterruptCheckFrequency(interruptCheckFrequency),
	}
}

// Compile parses and type-checks src, which must be a boolean expression
// (or dyn, checked at evaluation time), over a response of PredicateSizes. Errors are meant for users: syntax
// and type errors carry the CEL message with line:column, e.g.
//
//	ERROR: <input>:1:21: Syntax error: mismatched input ...
//
// and an expression whose estimated cost over PredicateSizes exceeds CostLimit is refused (ErrTooExpensive).
func Compile(src string) (*Program, error) {
	e, ast, regexes, cost, err := parse(src, PredicateSizes)
	if err != nil {
		return nil, err
	}
	switch t := ast.OutputType(); t.Kind() {
	case types.BoolKind, types.DynKind:
	default:
		return nil, fmt.Errorf("expression must be a boolean expression, got %s", t)
	}
	prg, err := e.Program(ast, programOptions(PredicateSizes, regexes)...)
	if err != nil {
		return nil, fmt.Errorf("invalid expression: %w", err)
	}
	return &Program{src: src, prg: prg, quick: quick(ast, regexes, cost)}, nil
}

// Eval returns the predicate's value for r. Runtime errors (a missing key, a
// body that is not an object, a non-boolean result, the cost limit or the
// timeout being exceeded) are returned as errors.
func (p *Program) Eval(r Response) (bool, error) {
	return p.EvalContext(context.Background(), r)
}

// EvalContext is Eval with a context: evaluation stops with an error when
// ctx is done. EvalTimeout applies in any case.
func (p *Program) EvalContext(ctx context.Context, r Response) (ok bool, err error) {
	defer func() {
		// CEL should not panic, but a predicate must never crash the operator.
		if rec := recover(); rec != nil {
			ok, err = false, &EvalError{Kind: kindInternal}
		}
	}()
	ctx, run, release, err := slot(ctx, p.quick)
	if err != nil {
		return false, err
	}
	defer release()
	var out ref.Val
	run(func() {
		out, _, err = p.prg.ContextEval(ctx, map[string]any{VarResponse: activation(r, PredicateSizes)})
	})
	if err != nil {
		return false, evalError(err)
	}
	b, isBool := out.Value().(bool)
	if !isBool {
		return false, fmt.Errorf("expression must evaluate to a boolean, got %s", out.Type().TypeName())
	}
	return b, nil
}

// activation returns the value of the response variable for r: a map with
// statusCode, headers and body, within sizes: the body made valid UTF-8 and cut to sizes.BodyBytes (boundBody; a
// cut JSON body is then a string), the headers bounded as headerMap says.
func activation(r Response, sizes Sizes) map[string]any {
	body := boundBody(r.Body, sizes.BodyBytes)
	return map[string]any{
		"statusCode": int64(r.StatusCode),
		fieldHeaders: headerMap(r.Header),
		fieldBody:    parseBody(body),
	}
}

// boundBody is b as an expression sees it: valid UTF-8 (each run of invalid bytes replaced by one U+FFFD) cut
// on a UTF-8 boundary to at most n bytes. The replacement comes first, so that nothing decoded from the body
// grows past n: the JSON decoder turns each invalid byte of a string into U+FFFD (3 bytes), and a 4 KiB body of
// them would give a 12 KiB string where the cost estimate assumes 4 KiB (issue 40 row 5).
func boundBody(b []byte, n int) []byte {
	if !utf8.Valid(b) {
		b = []byte(strings.ToValidUTF8(string(b), string(utf8.RuneError)))
	}
	if len(b) > n {
		b = []byte(cutUTF8(string(b), n))
	}
	return b
}

// headerMap is h as CEL sees it: names lower-cased (names that differ only by case merged), the values of one
// name joined with ", "; the first maxHeaders names in sorted order, each value cut to maxHeaderValueBytes,
// names longer than maxHeaderNameBytes left out.
func headerMap(h http.Header) map[string]string {
	merged := make(map[string]string, len(h))
	for _, k := range slices.Sorted(maps.Keys(h)) {
		if len(k) > maxHeaderNameBytes {
			continue
		}
		lk := strings.ToLower(k)
		v := strings.Join(h[k], ", ")
		if prev, dup := merged[lk]; dup {
			// Non-canonical keys that differ only by case: merge them.
			v = prev + ", " + v
		}
		merged[lk] = v
	}
	headers := make(map[string]string, min(len(merged), maxHeaders))
	for _, k := range slices.Sorted(maps.Keys(merged)) {
		if len(headers) == maxHeaders {
			break
		}
		headers[k] = cutUTF8(merged[k], maxHeaderValueBytes)
	}
	return headers
}

// cutUTF8 returns at most n bytes of s, cut on a UTF-8 boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// parseBody returns the JSON value of b, or b as a string when b is not a
// single valid JSON value (json.Valid rejects trailing data).
func parseBody(b []byte) any {
	if v, ok := parseJSON(b); ok {
		return v
	}
	return strings.ToValidUTF8(string(b), string(utf8.RuneError))
}

func parseJSON(b []byte) (any, bool) {
	if len(bytes.TrimSpace(b)) == 0 || !json.Valid(b) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return convertNumbers(v), true
}

// convertNumbers replaces json.Number values with int64 when they are
// integers that fit, float64 otherwise.
func convertNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = convertNumbers(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = convertNumbers(e)
		}
		return t
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(t), 64) // ±Inf on overflow
		return f
	default:
		return v
	}
}

// ValueProgram is a compiled expression that gives an output value (ExternalAction spec.outputs.values).
// Safe for concurrent use.
type ValueProgram struct {
	src string
	prg cel.Program
}

// Source returns the expression the program was compiled from.
func (p *ValueProgram) Source() string { return p.src }

// CompileValue parses and type-checks src, an expression of any type over the same response variable as
// Compile, over a response of ValueSizes. Errors are meant for users, as Compile's are (an expression too
// expensive over ValueSizes is refused, ErrTooExpensive).
func CompileValue(src string) (*ValueProgram, error) {
	e, ast, regexes, _, err := parse(src, ValueSizes)
	if err != nil {
		return nil, err
	}
	prg, err := e.Program(ast, programOptions(ValueSizes, regexes)...)
	if err != nil {
		return nil, fmt.Errorf("invalid expression: %w", err)
	}
	return &ValueProgram{src: src, prg: prg}, nil
}

// MaxValueBytes caps the text of an output value, in bytes: a larger value is the cost limit error, found
// before the value is written out as text.
const MaxValueBytes = maxStringBytes

// EvalString evaluates the expression on r and returns its value as text: a string as it is, bytes as they
// are, a number or boolean in its JSON form (3, 1.5, true), and a list or map as JSON (RFC 8259). A null
// result, a runtime error (a missing key, the cost limit, EvalTimeout or ctx ending) is an error.
func (p *ValueProgram) EvalString(ctx context.Context, r Response) (s string, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			s, err = "", &EvalError{Kind: kindInternal}
		}
	}()
	ctx, run, release, err := slot(ctx, false)
	if err != nil {
		return "", err
	}
	defer release()
	var out ref.Val
	run(func() { out, _, err = p.prg.ContextEval(ctx, map[string]any{VarResponse: activation(r, ValueSizes)}) })
	if err != nil {
		return "", evalError(err)
	}
	switch v := out.(type) {
	case types.String:
		return string(v), checkValueSize(len(v))
	case types.Bytes:
		return string(v), checkValueSize(len(v))
	case types.Null:
		return "", errors.New("expression evaluated to null")
	}
	if valueBound(out, MaxValueBytes) > MaxValueBytes {
		// Checked before it is written out: a list may hold one long string many times over.
		return "", &EvalError{Kind: kindCostLimit}
	}
	native, err := out.ConvertToNative(reflect.TypeFor[*structpb.Value]())
	if err != nil {
		return "", fmt.Errorf("expression value of type %s cannot be written as text", out.Type().TypeName())
	}
	if i, ok := out.(types.Int); ok { // JSON numbers are doubles; an int keeps all its digits
		return strconv.FormatInt(int64(i), 10), nil
	}
	if u, ok := out.(types.Uint); ok {
		return strconv.FormatUint(uint64(u), 10), nil
	}
	b, err := protojson.Marshal(native.(*structpb.Value))
	if err != nil {
		return "", fmt.Errorf("encoding the expression value as JSON: %w", err)
	}
	// protojson output is not stable in whitespace; compact it.
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return "", fmt.Errorf("encoding the expression value as JSON: %w", err)
	}
	return buf.String(), nil
}

// checkValueSize is the cost limit error for a value of n bytes over MaxValueBytes.
func checkValueSize(n int) error {
	if n > MaxValueBytes {
		return &EvalError{Kind: kindCostLimit}
	}
	return nil
}

// QuickCost is the estimated worst-case cost (cost units, over PredicateSizes) at or under which a predicate
// (Program: successWhen, a post-check's applied and notApplied) without comprehensions (all, exists, map, filter
// ...) and without matches is quick: it runs at once, without an evaluation slot. `response.statusCode == 201`
// is 3; a comparison of a body field and a header, 7. Without loops every node of the expression runs once, so
// its time follows its cost and its 4 KiB input: at most 59 µs and 43 KB allocated in the shapes measured
// (BenchmarkQuickEvaluation, docs/security.md), less than a wait for a slot costs to keep. A slot would bound
// nothing there; it would only put one tenant's one-comparison verdict behind another tenant's admitted
// expressions, each up to EvalTimeout (issue 40 item 6). What a tenant can make the manager spend on quick
// evaluations is bounded by what it can make it send: one evaluation per response, in the send's goroutine.
// Output values (ValueProgram) always take a slot: their input is up to 256 KiB and their result is encoded,
// which costs with the body, not with the expression.
const QuickCost = 1_000

// quick reports whether an expression whose estimated cost is cost runs without a slot (QuickCost).
func quick(ast *cel.Ast, regexes map[string]int, cost uint64) bool {
	if cost > QuickCost || len(regexes) > 0 {
		return false
	}
	loops := false
	celast.PreOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		loops = loops || e.Kind() == celast.ComprehensionKind
	}))
	return !loops
}

// slot waits at most SlotWait (and while ctx lasts) for an evaluation slot, then gives the evaluation its own
// EvalTimeout from that moment: the returned context; run, which runs the evaluation on a background thread
// (evalThreads); and release, which frees the slot and the timer. A slot not had in time is an EvalError that is
// Unfinished. A quick expression's evaluation (QuickCost) takes no slot and runs in the caller's goroutine.
func slot(ctx context.Context, quick bool) (evalCtx context.Context, run func(func()), release func(), err error) {
	if quick {
		evalCtx, cancel := context.WithTimeout(ctx, EvalTimeout)
		return evalCtx, func(f func()) { f() }, cancel, nil
	}
	waitCtx, cancelWait := context.WithTimeout(ctx, SlotWait)
	free, err := acquire(waitCtx)
	cancelWait()
	if err != nil {
		e := evalError(err)
		e.Kind = "no evaluation slot within " + SlotWait.String() + " (" + e.Kind + ")"
		return nil, nil, nil, e
	}
	evalCtx, cancel := context.WithTimeout(ctx, EvalTimeout)
	return evalCtx, evalThreads.run, func() { cancel(); free() }, nil
}

// Unfinished reports whether err says that an evaluation did not finish for a reason outside the expression and
// its input: its deadline (EvalTimeout), no evaluation slot within SlotWait, or cancellation (a shutdown). Such
// an evaluation decides nothing (DESIGN rule 12): run it again later on the same input. An expression's own
// runtime error (a missing key, a type mismatch) is a finished evaluation; so is the cost limit, which
// NeverFinishes.
func Unfinished(err error) bool {
	e, ok := errors.AsType[*EvalError](err)
	if !ok {
		return false
	}
	return e.ctx != nil || e.Kind == "operation interrupted" || e.Kind == "operation cancelled"
}

// NeverFinishes reports whether err says that the evaluation cannot finish on this input, however often it is
// run: the cost limit (CostLimit) or an internal error of the evaluator. Such an evaluation decides nothing
// either (DESIGN rule 12): the input waits for a person.
func NeverFinishes(err error) bool {
	e, ok := errors.AsType[*EvalError](err)
	return ok && (e.Kind == kindCostLimit || e.Kind == kindInternal)
}

// Headers returns h as an expression sees response.headers: names lower-cased (names that differ only by case
// merged), the values of one name joined with ", ", bounded (the first 64 names in sorted order, each value cut
// to 8 KiB, names over the header name bound left out). Headers of an http.Header holding exactly such a map
// returns the same map, so a map kept in status gives a later evaluation the same input.
func Headers(h http.Header) map[string]string { return headerMap(h) }

// EvalError is a runtime error of an expression. Its text names the kind of failure only ("no such key",
// "index out of bounds", ...), never the values involved: CEL quotes them ("no such key: <key>"), and a key or
// index may come from the response, which the text must not carry into status, conditions or Events
// (DESIGN rule 11). The CEL error itself is not kept.
type EvalError struct {
	// Kind is one of evalErrorKinds, the text of a context error (context deadline exceeded, context
	// canceled, or either after "no evaluation slot within 2s"), "internal error" or "runtime error".
	Kind string
	// ctx is the context error that stopped the evaluation, if any (errors.Is).
	ctx error
}

func (e *EvalError) Error() string { return "evaluating expression: " + e.Kind }

// Unwrap returns the context error that stopped the evaluation (nil otherwise).
func (e *EvalError) Unwrap() error { return e.ctx }

// evalErrorKinds are the beginnings of CEL runtime error texts that name a kind of failure; the text after
// them (a key, an index, a type conversion's input) is dropped. Any other error is "runtime error".
var evalErrorKinds = []string{
	"no such key", "no such attribute", "no such overload", "no matching overload", "index out of bounds",
	"index out of range", "division by zero", "modulus by zero", "type conversion error", "error parsing regexp",
	"integer overflow", kindCostLimit, "operation interrupted", "operation cancelled",
	"invalid UTF-8", "unsupported",
}

// kindCostLimit is the kind of an evaluation stopped by CostLimit; kindInternal of one the evaluator panicked on.
const (
	kindCostLimit = "actual cost limit exceeded"
	kindInternal  = "internal error"
)

// evalError is err (a CEL evaluation error) as an EvalError.
func evalError(err error) *EvalError {
	for _, c := range []error{context.DeadlineExceeded, context.Canceled} {
		if errors.Is(err, c) {
			return &EvalError{Kind: c.Error(), ctx: c}
		}
	}
	msg := err.Error()
	for _, k := range evalErrorKinds {
		if strings.HasPrefix(msg, k) {
			if strings.Contains(msg, "cost limit") {
				return &EvalError{Kind: kindCostLimit}
			}
			return &EvalError{Kind: k}
		}
	}
	if strings.Contains(msg, "cost limit") {
		return &EvalError{Kind: kindCostLimit}
	}
	return &EvalError{Kind: "runtime error"}
}

// DefaultSuccess reports the default success rule: 200 <= code <= 299.
func DefaultSuccess(code int) bool {
	return code >= 200 && code <= 299
}

// parse checks src's size, compiles it (parse and type-check) in the shared environment, checks the patterns
// of matches (regexPatterns, whose program sizes it returns), that every call has a price (unpricedCall), the
// iterations of its comprehensions (checkIterations) and its estimated cost over sizes, which it returns (cost
// units); errors are meant for users (an empty or too long expression, the CEL message with line:column, a
// pattern refused, or ErrTooExpensive).
func parse(src string, sizes Sizes) (e *cel.Env, ast *cel.Ast, regexes map[string]int, cost uint64, err error) {
	if strings.TrimSpace(src) == "" {
		return nil, nil, nil, 0, errors.New("expression is empty")
	}
	if len(src) > MaxSourceLength {
		return nil, nil, nil, 0, fmt.Errorf("expression is too long: %d bytes, limit %d", len(src), MaxSourceLength)
	}
	e, err = env()
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("creating CEL environment: %w", err)
	}
	ast, iss := e.Compile(src)
	if iss.Err() != nil {
		return nil, nil, nil, 0, fmt.Errorf("invalid expression: %w", iss.Err())
	}
	if err := unpricedCall(ast); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("invalid expression: %w", err)
	}
	regexes, err = regexPatterns(ast)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("invalid expression: %w", err)
	}
	if err := checkIterations(ast, sizes); err != nil {
		return nil, nil, nil, 0, err
	}
	if cost, err = checkCost(e, ast, sizes, regexes); err != nil {
		return nil, nil, nil, 0, err
	}
	return e, ast, regexes, cost, nil
}
