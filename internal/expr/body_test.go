package expr

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// row5Bodies are legal 4 KiB predicate bodies whose strings are as long as a body allows: issue 40 row 5's
// 4,088 bytes of 0xFF in a JSON string (each became U+FFFD, a 12,264-byte string), the same in valid ASCII,
// and the body as a plain string.
var row5Bodies = map[string]string{
	"invalid UTF-8 in a JSON string": `{"s":"` + strings.Repeat("\xff", 4088) + `"}`,
	"invalid UTF-8 between letters":  `{"s":"` + strings.Repeat("a\xff", 2044) + `"}`,
	"ASCII in a JSON string":         `{"s":"` + strings.Repeat("a", 4088) + `"}`,
	"invalid UTF-8 as the body":      strings.Repeat("a\xff", 2048),
}

// The declared input sizes hold for every input: no string an expression sees is longer than the declared
// body, whatever bytes the body holds (issue 40 row 5).
func TestDeclaredSizesHoldForEveryBody(t *testing.T) {
	for name, body := range row5Bodies {
		v := activation(jsonResp(200, body), PredicateSizes)[fieldBody]
		var s string
		switch b := v.(type) {
		case string:
			s = b
		case map[string]any:
			s, _ = b["s"].(string)
		}
		if len(s) > PredicateSizes.BodyBytes || !utf8.ValidString(s) {
			t.Errorf("%s: a string of %d bytes (valid UTF-8 %v), over the declared %d", name, len(s),
				utf8.ValidString(s), PredicateSizes.BodyBytes)
		}
	}
}

// An expression admitted over the declared sizes never reaches the cost limit on a legal response: each of these
// is either refused at compile or evaluates within the budget on every row5Bodies body (issue 40 row 5: an
// expression estimated over a 2,048-byte string met a 12,264-byte one).
func TestAdmittedExpressionsFinishOnEveryBody(t *testing.T) {
	var srcs []string
	for m := 4; m <= 40; m += 2 { // m copies of the string joined: cost about m²/2 times its length
		srcs = append(srcs, `(`+strings.TrimSuffix(strings.Repeat("response.body.s + ", m), " + ")+`).size() > 0`)
	}
	srcs = append(srcs, `response.body.s.matches('(?:a?){1000}z')`, `response.body.s.matches('(?:a?){500}z')`,
		`response.body.matches('(?:a?){1000}z')`)
	admitted := 0
	for _, src := range srcs {
		p, err := Compile(src)
		if errors.Is(err, ErrTooExpensive) {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		admitted++
		for name, body := range row5Bodies {
			_, err := p.EvalContext(context.Background(), jsonResp(200, body))
			if NeverFinishes(err) {
				t.Errorf("%s, admitted, on %s: %v", src, name, err)
			}
		}
	}
	if admitted < 3 {
		t.Errorf("%d expressions admitted, want at least 3 to test", admitted)
	}
}
