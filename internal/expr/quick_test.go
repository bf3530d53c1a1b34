package expr

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// slotted is `response.statusCode == 201` written with a comprehension, so that its evaluation takes a slot.
const slotted = `[201].exists(c, c == response.statusCode)`

// A quick predicate (QuickCost: no comprehension, no matches, an estimated cost of at most QuickCost) is
// evaluated while every slot is held; a predicate with a comprehension, with matches or over QuickCost, and any
// output value, waits for a slot and is Unfinished without one (issue 40 item 6: another tenant's admitted
// expressions in every slot never hold back a one-comparison verdict).
func TestQuickPredicatesTakeNoSlot(t *testing.T) {
	long := `response.body.s + response.body.s == response.body.t` // string work priced by the byte
	cases := []struct {
		src   string
		quick bool
	}{
		{`response.statusCode == 201`, true},
		{`response.statusCode == 201 && response.headers["x-charge"] == "ch_1" && response.body.id.startsWith("ch_")`, true},
		{`response.body.state in ["paid", "settled"]`, true},
		{long, false},
		{slotted, false},
		{`response.body.items.all(i, i.ok)`, false},
		{`response.body.id.matches("^ch_[0-9]+$")`, false},
	}
	in := Response{StatusCode: 201, Header: http.Header{"X-Charge": {"ch_1"}},
		Body: []byte(`{"id":"ch_1","state":"paid","items":[],"s":"a","t":"aa"}`)}
	release := Occupy()
	defer release()
	for _, c := range cases {
		p, err := Compile(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond) // a slot's wait ends with it
		_, err = p.EvalContext(ctx, in)
		cancel()
		if c.quick && err != nil {
			t.Errorf("%s: quick, yet with every slot held: %v", c.src, err)
		}
		if !c.quick && !Unfinished(err) {
			t.Errorf("%s: takes a slot, yet with every slot held: err %v, want Unfinished", c.src, err)
		}
	}
	if p, err := Compile(long); err == nil && p.quick {
		t.Errorf("%s: quick, want over QuickCost", long)
	}
	v, err := CompileValue(`response.statusCode`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := v.EvalString(ctx, in); !Unfinished(err) {
		t.Errorf("an output value with every slot held: err %v, want Unfinished", err)
	}
}

// BenchmarkQuickEvaluation measures the time (ns/op, one goroutine: its CPU) and allocations of quick predicates
// over the worst inputs they are given: a 4 KiB body (the PredicateSizes bound) of many small values, of one long
// string, of invalid UTF-8, and 64 headers of 8 KiB, parsed for each evaluation as in the manager. The figures
// are docs/security.md's bound on what a quick evaluation, which takes no slot, costs.
func BenchmarkQuickEvaluation(b *testing.B) {
	many := "[" + strings.Repeat("0,", 2047) + "0]"
	str := `{"s":"` + strings.Repeat("a", 4086) + `"}`
	hdr := http.Header{}
	for i := range maxHeaders {
		hdr.Set(fmt.Sprintf("x-h%02d", i), strings.Repeat("v", maxHeaderValueBytes))
	}
	shapes := []struct {
		name, src, body string
		header          http.Header
	}{
		{"status", `response.statusCode == 201`, `{}`, nil},
		{"many-values", `response.statusCode == 201 && size(response.body) > 0`, many, nil},
		{"long-string", `response.body.s.startsWith("a") && response.body.s.endsWith("a") && response.body.s.contains("b")`, str, nil},
		// indexOf and lastIndexOf convert the string to runes each: the slowest per cost unit found.
		{"index-of", `response.body.s.indexOf("b") > 0 && response.body.s.lastIndexOf("b") > 0`, str, nil},
		{"invalid-utf8", `response.statusCode == 201`, `{"s":"` + strings.Repeat("\xff", 4086) + `"}`, nil},
		{"headers", `response.headers["x-h00"] == response.headers["x-h63"]`, `{}`, hdr},
	}
	for _, s := range shapes {
		p, err := Compile(s.src)
		if err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		if !p.quick {
			b.Fatalf("%s: not quick", s.name)
		}
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := jsonResp(201, s.body)
				if s.header != nil {
					r.Header = s.header
				}
				_, _ = p.Eval(r)
			}
		})
	}
}
