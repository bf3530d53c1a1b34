package expr

import (
	"context"
	"slices"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
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

// Calls of every kind of rule, resolved at compile or only at evaluation (dyn arguments), are priced at
// evaluation: none is charged as unpriced (which would be the cost limit).
func TestPricedCallsRun(t *testing.T) {
	body := `{"s":"Abc-1","n":3,"f":1.5,"l":["a","b"],"m":{"k":"v"},"t":"2026-01-02T03:04:05Z","d":"90s","b":true}`
	for _, src := range []string{
		`response.body.n + 1 == 4 && response.body.n * 2 - 1 == 5 && response.body.n / 2 == 1 && response.body.n % 2 == 1`,
		`-response.body.f < 0.0 && response.body.f > 1 && response.body.f <= 1.5 && response.body.n >= 3u`,
		`response.body.s.size() == 5 && size(response.body.l) == 2 && response.body.m.size() == 1`,
		`response.body.s.contains('bc') && response.body.s.startsWith('A') && response.body.s.endsWith('1')`,
		`'a' in response.body.l && 'k' in response.body.m && response.body.l[0] == 'a' && response.body.m['k'] == 'v'`,
		`response.body.s.lowerAscii() == 'abc-1' && response.body.s.upperAscii() == 'ABC-1' && ' x '.trim() == 'x'`,
		`response.body.s.charAt(0) == 'A' && response.body.s.indexOf('b') == 1 && response.body.s.lastIndexOf('c') == 2`,
		`response.body.s.substring(1) == 'bc-1' && response.body.s.substring(1, 2) == 'b' && 'ab'.reverse() == 'ba'`,
		`response.body.s.split('-').size() == 2 && response.body.l.join(',') == 'a,b' && response.body.s.replace('-', '') == 'Abc1'`,
		`strings.quote(response.body.s) == '"Abc-1"'`,
		`response.body.s.matches('^[A-Za-z]+-[0-9]$') && matches(response.body.s, '1$')`,
		`string(response.body.n) == '3' && int('4') == 4 && double(response.body.n) == 3.0 && uint(response.body.n) == 3u`,
		`bytes(response.body.s).size() == 5 && string(b'ab') == 'ab' && bool('true') && dyn(response.body.n) == 3`,
		`timestamp(response.body.t).getFullYear() == 2026 && timestamp(response.body.t).getMonth() == 0 && timestamp(response.body.t).getDayOfMonth() == 1`,
		`timestamp(response.body.t).getHours('UTC') == 3 && duration(response.body.d).getSeconds() == 90 && duration(response.body.d) + duration('1s') > duration('1m')`,
		`timestamp(response.body.t) - timestamp(response.body.t) == duration('0s') && timestamp(response.body.t) + duration('1h') > timestamp(response.body.t)`,
		`response.body.?s.hasValue() && response.body.?x.orValue('d') == 'd' && optional.of(1).value() == 1 && !optional.none().hasValue()`,
		`response.body.l[?0].or(optional.of('z')).value() == 'a' && response.body.m[?'k'].hasValue() && optional.ofNonZeroValue('').orValue('e') == 'e'`,
		`response.body.l.map(x, x) == ['a', 'b'] && response.body.l + ['c'] == ['a', 'b', 'c'] && type(response.body.n) == int`,
		`response.body.l.exists(x, x == 'b') && response.body.l.all(x, x != 'z') && response.body.l.filter(x, x == 'a').size() == 1`,
		`response.body.b ? !false : false`,
		`[optional.of(1), optional.none()].unwrapOpt() == [1] && optional.unwrap([optional.of(2)]) == [2]`,
		`response.body.l.first().value() == 'a' && response.body.l.last().value() == 'b'`,
	} {
		p, err := Compile(src)
		if err != nil {
			t.Errorf("%s: %v", src, err)
			continue
		}
		if ok, err := p.Eval(jsonResp(200, body)); !ok || err != nil {
			t.Errorf("%s = %v, %v; want true", src, ok, err)
		}
	}
	// format's estimate is its largest result (maxStringBytes), so no expression calling it is admitted: its
	// evaluation is checked without the estimate.
	if err := uncheckedEval(t, `'%s/%d'.format([response.body.s, response.body.n]) == 'Abc-1/3'`, false, body); err != nil {
		t.Errorf("format: %v", err)
	}
}

// A call is charged at evaluation no more than the estimate prices it: equality and ordering by the shorter
// operand (a comparison stops there), startsWith and endsWith by the prefix or suffix, a conversion by the value
// it makes. Charging more at evaluation than at compile (both operands, the whole string; a conversion's new
// bytes, which cel-go's rule leaves out) let an admitted expression reach the cost limit on a legal response,
// as issue 40 row 5 did.
func TestCallsChargedAsEstimated(t *testing.T) {
	long := strings.Repeat("a", 100_000)
	body := `{"s":"` + long + `","t":"` + long + `"}`
	repeat := func(term string, n int) string { return strings.TrimSuffix(strings.Repeat(term+" && ", n), " && ") }
	for _, src := range []string{
		repeat(`response.body.s.startsWith('a')`, 200),
		repeat(`response.body.s.endsWith('a')`, 200),
		repeat(`response.body.s == response.body.t`, 30),
		repeat(`response.body.s >= response.body.t`, 30),
		repeat(`response.body.s != 'b'`, 200),
		repeat(`bytes(response.body.s).size() > 0`, 3),
		repeat(`string(bytes(response.body.s)).size() > 0`, 1),
		repeat(`strings.quote(response.body.s).size() > 0`, 1),
	} {
		p, err := CompileValue(src)
		if err != nil {
			t.Errorf("%.60s...: %v, want it admitted", src, err)
			continue
		}
		if s, err := p.EvalString(context.Background(), jsonResp(200, body)); s != "true" || err != nil {
			t.Errorf("%.60s... = %q, %v; want true within the budget", src, s, err)
		}
	}
}
