package expr

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
)

// A price on every function (issue 40 item 2). Every overload of the environment has a rule in the cost model,
// at compile (the estimate over the declared sizes) and at evaluation (the actual cost): prices names it, and
// TestEveryOverloadHasAPrice enumerates the environment's overloads and fails for any without one, so the next
// function cannot arrive unpriced. Kubernetes' k8s.io/apiserver pkg/cel/library/cost.go is the model: a
// function without a rule is a bug. Should one arrive anyway, an expression calling it is refused at compile
// (unpricedCall) and its call charged past the budget at evaluation (CallCost).

// price is the rule by which the cost model charges an overload.
type price string

const (
	// priceScalar: a call over fixed-size values (numbers, bools, timestamps, durations, types, an optional's
	// wrapper): 1 at compile (cel-go's rule for constant-time calls) and at evaluation (CallCost: 1, nothing to
	// traverse or allocate).
	priceScalar price = "scalar"
	// priceRead: a call that reads strings, bytes, lists or maps and produces a fixed-size value or one it reads
	// (==, <, contains, startsWith, in, size, an index, a string parsed to a number): at compile cel-go's rule for
	// the overload (a comparison 0.1 per byte or element of the shorter operand, startsWith and endsWith 0.1 per
	// byte of the prefix, contains the product of the two lengths, in a unit per element of a list; 1 for the
	// others); at evaluation the same for comparisons, startsWith and endsWith (compareCost), else CallCost's
	// traversal of the arguments, 0.1 a byte and 1 an element (size reads nothing).
	priceRead price = "read"
	// priceLogic: &&, ||, !, ?: and the comprehension's loop test: charged their arguments only (cel-go's rule,
	// the cheaper branch at the least); CallCost charges 1.
	priceLogic price = "logic"
	// priceConvert: a conversion that produces a new string, bytes or list from its argument (string(x),
	// bytes(s), strings.quote, optional.unwrap): at compile cel-go's rule with the result's size (string to
	// bytes at most 4 bytes a character, quote at most twice as long); at evaluation CallCost's traversal plus
	// the result's bytes or elements.
	priceConvert price = "convert"
	// priceConcat: _+_ of strings, bytes and lists: EstimateCallCost and CallCost, a unit per byte of the new
	// string (a list concatenation charged elementCost per element it adds).
	priceConcat price = "concat"
	// priceStringsExt: the strings extension's own pair of rules, its estimator and its tracker (ext.Strings,
	// version 5 and later): the traversal of the string, the product of the two lengths for a search, and the
	// result's size.
	priceStringsExt price = "strings extension"
	// priceGuarded: replace, join and format: the strings extension's pair (format: EstimateCallCost, at most
	// maxStringBytes) and, before the call runs, the bound of its result (guarded).
	priceGuarded price = "guarded"
	// priceSplit: split: splitEstimate and splitCost, elementCost per element.
	priceSplit price = "split"
	// priceMatches: matches: the compiled program's instructions times the input's bytes (regex.go).
	priceMatches price = "matches"
)

// pricedOverloads lists every overload of the environment by its rule.
var pricedOverloads = map[price][]string{
	priceScalar: {
		"add_double", "add_duration_duration", "add_duration_timestamp", "add_int64", "add_timestamp_duration",
		"add_uint64", "bool_to_bool", "divide_double", "divide_int64", "divide_uint64", "double_to_double",
		"double_to_int64", "double_to_uint64", "duration_to_duration", "duration_to_hours", "duration_to_int64",
		"duration_to_milliseconds", "duration_to_minutes", "duration_to_seconds", "greater_bool", "greater_double",
		"greater_double_int64", "greater_double_uint64", "greater_duration", "greater_equals_bool",
		"greater_equals_double", "greater_equals_double_int64", "greater_equals_double_uint64",
		"greater_equals_duration", "greater_equals_int64", "greater_equals_int64_double",
		"greater_equals_int64_uint64", "greater_equals_timestamp", "greater_equals_uint64",
		"greater_equals_uint64_double", "greater_equals_uint64_int64", "greater_int64", "greater_int64_double",
		"greater_int64_uint64", "greater_timestamp", "greater_uint64", "greater_uint64_double",
		"greater_uint64_int64", "int64_to_double", "int64_to_int64", "int64_to_timestamp", "int64_to_uint64",
		"less_bool", "less_double", "less_double_int64", "less_double_uint64", "less_duration", "less_equals_bool",
		"less_equals_double", "less_equals_double_int64", "less_equals_double_uint64", "less_equals_duration",
		"less_equals_int64", "less_equals_int64_double", "less_equals_int64_uint64", "less_equals_timestamp",
		"less_equals_uint64", "less_equals_uint64_double", "less_equals_uint64_int64", "less_int64",
		"less_int64_double", "less_int64_uint64", "less_timestamp", "less_uint64", "less_uint64_double",
		"less_uint64_int64", "modulo_int64", "modulo_uint64", "multiply_double", "multiply_int64", "multiply_uint64",
		"negate_double", "negate_int64", "optional_hasValue", "optional_none", "optional_of",
		"optional_ofNonZeroValue", "optional_orValue_value", "optional_or_optional", "optional_value",
		"subtract_double", "subtract_duration_duration", "subtract_int64", "subtract_timestamp_duration",
		"subtract_timestamp_timestamp", "subtract_uint64", "timestamp_to_day_of_month",
		"timestamp_to_day_of_month_1_based", "timestamp_to_day_of_week", "timestamp_to_day_of_year",
		"timestamp_to_hours", "timestamp_to_int64", "timestamp_to_milliseconds", "timestamp_to_minutes",
		"timestamp_to_month", "timestamp_to_seconds", "timestamp_to_timestamp", "timestamp_to_year", "to_dyn", "type",
		"uint64_to_double", "uint64_to_int64", "uint64_to_uint64",
	},
	priceRead: {
		"bytes_size", "contains_string", "ends_with_string", "equals", "greater_bytes", "greater_equals_bytes",
		"greater_equals_string", "greater_string", "in_list", "in_map", "index_list", "index_map", "less_bytes",
		"less_equals_bytes", "less_equals_string", "less_string", "list_first", "list_last",
		"list_optindex_optional_int", "list_size", "map_optindex_optional_value", "map_size", "not_equals",
		"optional_list_index_int", "optional_list_optindex_optional_int", "optional_map_index_value",
		"optional_map_optindex_optional_value", "select_optional_field", "size_bytes", "size_list", "size_map",
		"size_string", "starts_with_string", "string_size", "string_to_bool", "string_to_double",
		"string_to_duration", "string_to_int64", "string_to_timestamp", "string_to_uint64",
		"timestamp_to_day_of_month_1_based_with_tz", "timestamp_to_day_of_month_with_tz",
		"timestamp_to_day_of_week_with_tz", "timestamp_to_day_of_year_with_tz", "timestamp_to_hours_with_tz",
		"timestamp_to_milliseconds_with_tz", "timestamp_to_minutes_with_tz", "timestamp_to_month_with_tz",
		"timestamp_to_seconds_tz", "timestamp_to_year_with_tz",
	},
	priceLogic: {
		"__not_strictly_false__", "conditional", "logical_and", "logical_not", "logical_or", "not_strictly_false",
	},
	priceConvert: {
		"bool_to_string", "bytes_to_bytes", "bytes_to_string", "double_to_string", "duration_to_string",
		"int64_to_string", "optional_unwrap", "optional_unwrapOpt", "string_to_bytes", "string_to_string",
		"strings_quote", "timestamp_to_string", "uint64_to_string",
	},
	priceConcat: {
		"add_bytes", "add_list", "add_string",
	},
	priceStringsExt: {
		"string_char_at_int", "string_index_of_string", "string_index_of_string_int", "string_last_index_of_string",
		"string_last_index_of_string_int", "string_lower_ascii", "string_reverse", "string_substring_int",
		"string_substring_int_int", "string_trim", "string_upper_ascii",
	},
	priceGuarded: {
		"list_join", "list_join_string", overloadStringFormat, "string_replace_string_string",
		"string_replace_string_string_int",
	},
	priceSplit: {
		"string_split_string", "string_split_string_int",
	},
	priceMatches: {
		"matches", "matches_string",
	},
}

// prices is pricedOverloads by overload ID.
var prices = func() map[string]price {
	m := map[string]price{}
	for p, ids := range pricedOverloads {
		for _, id := range ids {
			m[id] = p
		}
	}
	return m
}()

// unpricedOverloads returns "function (overload)" for every overload of e without a price, sorted.
func unpricedOverloads(e *cel.Env) []string {
	var out []string
	for name, fn := range e.Functions() {
		for _, o := range fn.OverloadDecls() {
			if _, ok := prices[o.ID()]; !ok {
				out = append(out, fmt.Sprintf("%s (%s)", name, o.ID()))
			}
		}
	}
	slices.Sort(out)
	return out
}

// pricedFunctions are the functions of the environment all of whose overloads have a price: at evaluation a call
// resolved only by its function's name (an argument of type dyn) is priced when its function is.
var pricedFunctions = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	e, err := env()
	if err != nil {
		return m
	}
	for name, fn := range e.Functions() {
		m[name] = true
		for _, o := range fn.OverloadDecls() {
			if _, ok := prices[o.ID()]; !ok {
				m[name] = false
			}
		}
	}
	return m
})

// priced reports whether a call of function, resolved to overloadID ("" when it is resolved at evaluation by
// its arguments), has a price.
func priced(function, overloadID string) bool {
	if overloadID != "" {
		_, ok := prices[overloadID]
		return ok
	}
	return pricedFunctions()[function]
}

// unpricedCall refuses an expression calling an overload without a price: the test keeps that from happening,
// and this keeps it from being run unpriced if it does.
func unpricedCall(ast *cel.Ast) error {
	native := ast.NativeRep()
	var missing map[string]bool
	celast.PreOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.CallKind {
			return
		}
		for _, id := range native.GetOverloadIDs(e.ID()) {
			if _, ok := prices[id]; !ok {
				if missing == nil {
					missing = map[string]bool{}
				}
				missing[e.AsCall().FunctionName()+" ("+id+")"] = true
			}
		}
	}))
	if missing != nil {
		return fmt.Errorf("the function %s has no price in the cost model and cannot be used; this is a bug, "+
			"please report it", slices.Sorted(maps.Keys(missing))[0])
	}
	return nil
}
