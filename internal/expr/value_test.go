package expr

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// Output values: strings as they are, numbers and booleans in JSON form, lists and maps as compact JSON; a
// missing field, null and a syntax error are errors.
func TestEvalString(t *testing.T) {
	resp := Response{
		StatusCode: 201,
		Header:     http.Header{"Location": {"/orders/19"}},
		Body:       []byte(`{"id":"ord_19","n":12345678901234,"f":1.5,"ok":true,"tags":["a","b"],"obj":{"b":1,"a":"x"},"nil":null}`),
	}
	for _, c := range []struct{ src, want, err string }{
		{`response.body.id`, "ord_19", ""},
		{`response.headers["location"]`, "/orders/19", ""},
		{`response.statusCode`, "201", ""},
		{`response.body.n`, "12345678901234", ""},
		{`response.body.f`, "1.5", ""},
		{`response.body.ok`, "true", ""},
		{`response.body.tags`, `["a","b"]`, ""},
		{`response.body.obj`, `{"a":"x","b":1}`, ""},
		{`"id-" + response.body.id`, "id-ord_19", ""},
		{`response.body.?missing.orValue("none")`, "none", ""},
		{`response.body.missing`, "", "no such key"},
		{`response.body.nil`, "", "null"},
	} {
		p, err := CompileValue(c.src)
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		got, err := p.EvalString(context.Background(), resp)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.src, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: err = %v, want %q", c.src, err, c.err)
		case got != c.want:
			t.Errorf("%s = %q, want %q", c.src, got, c.want)
		}
	}
	if _, err := CompileValue(`response.body.`); err == nil || !strings.Contains(err.Error(), "Syntax error") {
		t.Errorf("syntax error: %v", err)
	}
	c := NewCache(4)
	a, err := c.GetValue(`response.body.id`)
	b, _ := c.GetValue(`response.body.id`)
	if err != nil || a != b {
		t.Errorf("GetValue does not cache: %p %p %v", a, b, err)
	}
	if p, err := c.Get(`response.body.id`); err == nil && p != nil {
		// A predicate of the same source is a separate entry (dyn compiles as a predicate).
		if c.Len() != 2 {
			t.Errorf("cache len = %d, want 2 (value and predicate kept apart)", c.Len())
		}
	}
}
