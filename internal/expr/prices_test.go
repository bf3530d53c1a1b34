package expr

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Every overload of the expression environment has a price in the cost model, and every price names an overload
// of the environment: a function added to the environment (a new library, a cel-go upgrade) fails here, by name,
// until it is given a rule at compile and at evaluation (issue 40 item 2).
func TestEveryOverloadHasAPrice(t *testing.T) {
	e, err := env()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range unpricedOverloads(e) {
		t.Errorf("%s has no price: add it to pricedOverloads (prices.go) with the rule that charges it at compile "+
			"and at evaluation", o)
	}
	inEnv := map[string]bool{}
	for _, fn := range e.Functions() {
		for _, o := range fn.OverloadDecls() {
			inEnv[o.ID()] = true
		}
	}
	for p, ids := range pricedOverloads {
		for _, id := range ids {
			if !inEnv[id] {
				t.Errorf("%s is priced (%s) but not in the environment: remove it", id, p)
			}
		}
	}
	// The rules that have code of their own cover exactly their overloads.
	for id := range guarded {
		if prices[id] != priceGuarded {
			t.Errorf("%s is guarded but priced %q", id, prices[id])
		}
	}
	for _, id := range splitOverloads {
		if prices[id] != priceSplit {
			t.Errorf("%s is split but priced %q", id, prices[id])
		}
	}
	for id, p := range prices {
		_, isGuarded := guarded[id]
		if p == priceGuarded && !isGuarded || p == priceSplit && !slices.Contains(splitOverloads, id) {
			t.Errorf("%s is priced %q but has no such rule", id, p)
		}
		if p == priceMatches && id != "matches" && id != "matches_string" {
			t.Errorf("%s is priced as matches", id)
		}
	}
}

// A function without a price is found by the test's enumeration, refused at compile, and charged past the
// budget at evaluation.
func TestAnUnpricedFunctionIsRefused(t *testing.T) {
	base, err := env()
	if err != nil {
		t.Fatal(err)
	}
	e, err := base.Extend(cel.Function("shout", cel.MemberOverload("string_shout", []*cel.Type{cel.StringType},
		cel.StringType, cel.UnaryBinding(func(v ref.Val) ref.Val { return types.String(strings.ToUpper(string(v.(types.String)))) }))))
	if err != nil {
		t.Fatal(err)
	}
	if got := unpricedOverloads(e); !slices.Equal(got, []string{"shout (string_shout)"}) {
		t.Errorf("unpriced overloads = %v, want shout (string_shout)", got)
	}
	ast, iss := e.Compile(`'a'.shout() == 'A'`)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	if err := unpricedCall(ast); err == nil || !strings.Contains(err.Error(), "shout (string_shout)") {
		t.Errorf("unpricedCall = %v, want shout refused by name", err)
	}
	if c := (&estimator{}).CallCost("shout", "string_shout", []ref.Val{types.String("a")}, types.String("A")); *c <= CostLimit {
		t.Errorf("an unpriced call costs %d at evaluation, want more than the budget", *c)
	}
	if c := (&estimator{}).CallCost("size", "", []ref.Val{types.String("a")}, types.Int(1)); *c > CostLimit {
		t.Errorf("size resolved at evaluation costs %d, want it priced", *c)
	}
}
