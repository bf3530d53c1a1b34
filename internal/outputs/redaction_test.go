package outputs

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/internal/expr"
	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/redact"
)

// echoSecret is a ClusterDestination's token, with characters that JSON, percent-encoding and base64url
// write differently ("/", "+").
const echoSecret = "tok-5f0c/2a9e+71b3" //nolint:gosec // G101: a test credential

// escapeAll writes every character of s as a JSON \u escape.
func escapeAll(s string) string {
	var b strings.Builder
	for _, c := range s {
		fmt.Fprintf(&b, `\u%04x`, c)
	}
	return b.String()
}

// echoForms are the forms in which a destination echoes the token: the body or a header as sent, the
// expression that reads the echo (an output, and successWhen compares it), and the text that expression
// yields from the response as received (what a leak would give).
var echoForms = []struct {
	name   string
	body   string
	header http.Header
	read   string
	leak   string
}{
	{"JSON \\/ escape", `{"headers":{"Authorization":"Bearer tok-5f0c\/2a9e+71b3"}}`, nil,
		`response.body.headers["Authorization"]`, "Bearer " + echoSecret},
	{"JSON \\u002f escape", `{"headers":{"Authorization":"Bearer tok-5f0c\u002f2a9e\u002b71b3"}}`, nil,
		`response.body.headers["Authorization"]`, "Bearer " + echoSecret},
	{"JSON every character escaped", `{"seen":"` + escapeAll(echoSecret) + `"}`, nil, `response.body.seen`, echoSecret},
	{"JSON key", `{"` + escapeAll(echoSecret) + `":1}`, nil, `response.body.map(k, k)[0]`, echoSecret},
	{"percent-encoding upper case", `{"seen":"tok-5f0c%2F2a9e%2B71b3"}`, nil, `response.body.seen`, "tok-5f0c%2F2a9e%2B71b3"},
	{"percent-encoding lower case", `{"seen":"tok-5f0c%2f2a9e%2b71b3"}`, nil, `response.body.seen`, "tok-5f0c%2f2a9e%2b71b3"},
	{"percent-encoding mixed", `{"seen":"%74ok-5f0c%2f2a9e%2B71b3"}`, nil, `response.body.seen`, "%74ok-5f0c%2f2a9e%2B71b3"},
	{"hex lower case", `{"seen":"` + hex.EncodeToString([]byte(echoSecret)) + `"}`, nil, `response.body.seen`,
		hex.EncodeToString([]byte(echoSecret))},
	{"hex upper case", "seen " + strings.ToUpper(hex.EncodeToString([]byte(echoSecret))), nil, `response.body`,
		"seen " + strings.ToUpper(hex.EncodeToString([]byte(echoSecret)))},
	{"base64 padded", `{"seen":"` + base64.StdEncoding.EncodeToString([]byte(echoSecret)) + `"}`, nil, `response.body.seen`,
		base64.StdEncoding.EncodeToString([]byte(echoSecret))},
	{"base64 unpadded", `{"seen":"` + base64.RawStdEncoding.EncodeToString([]byte(echoSecret)) + `"}`, nil,
		`response.body.seen`, base64.RawStdEncoding.EncodeToString([]byte(echoSecret))},
	{"base64url padded", `{"seen":"` + base64.URLEncoding.EncodeToString([]byte(echoSecret)) + `"}`, nil,
		`response.body.seen`, base64.URLEncoding.EncodeToString([]byte(echoSecret))},
	{"base64url unpadded", `{"seen":"` + base64.RawURLEncoding.EncodeToString([]byte(echoSecret)) + `"}`, nil,
		`response.body.seen`, base64.RawURLEncoding.EncodeToString([]byte(echoSecret))},
	{"base64 inside a longer value (Basic)", `{"seen":"` + base64.StdEncoding.EncodeToString([]byte("user:"+echoSecret)) + `"}`,
		nil, `response.body.seen`, base64.StdEncoding.EncodeToString([]byte("user:" + echoSecret))},
	{"split across repeated header values", `{}`, http.Header{"X-Echo": {"Bearer tok-5f0c/2a", "9e+71b3"}},
		`response.headers["x-echo"].replace(", ", "")`, "Bearer " + echoSecret},
	{"inside a Location query", `{}`, http.Header{"Location": {"/things/1?id=7&auth=Bearer%20tok-5f0c%2f2a9e%2b71b3"}},
		`response.headers["location"]`, "/things/1?id=7&auth=Bearer%20tok-5f0c%2f2a9e%2b71b3"},
}

// A destination that echoes its credential in any of the forms it can be decoded from gets Redacted in
// status (status.response), in an output and in what successWhen sees, from the one redacted view; bodySHA256
// stays the hash of the body as sent (issue 23, rows 2 and 3).
func TestEchoedSecretFormsRedactedInStatusOutputsAndSuccessWhen(t *testing.T) {
	red := redact.New(echoSecret, "Bearer "+echoSecret)
	exprs := expr.NewCache(64)
	for _, tc := range echoForms {
		t.Run(tc.name, func(t *testing.T) {
			header := http.Header{"Content-Type": {"application/json"}}
			maps.Copy(header, tc.header)
			sum := sha256.Sum256([]byte(tc.body))
			resp := &httpexec.Response{StatusCode: 201, Header: header, Body: []byte(tc.body),
				BodySHA256: "sha256:" + hex.EncodeToString(sum[:]), BodyLength: int64(len(tc.body))}

			rec := theReaders.record(resp, red)
			stored, _ := json.Marshal(rec)
			if strings.Contains(string(stored), tc.leak) || strings.Contains(string(stored), echoSecret) {
				t.Errorf("status.response keeps the echo: %s", stored)
			}
			if rec.BodySHA256 != resp.BodySHA256 {
				t.Errorf("bodySHA256 %s, want the hash of the body as sent %s", rec.BodySHA256, resp.BodySHA256)
			}

			mgr := &Manager{Exprs: exprs}
			xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "echo", UID: "u1"},
				Spec: actionsv1alpha1.ExternalActionSpec{
					SuccessWhen: tc.read + " == " + strconv.Quote(tc.leak),
					Outputs: &actionsv1alpha1.ActionOutputs{SecretName: "out",
						Values: map[string]actionsv1alpha1.OutputExpression{"echo": actionsv1alpha1.OutputExpression(tc.read)}}}}
			if _, err := exprs.GetValue(tc.read); errors.Is(err, expr.ErrTooExpensive) {
				// Iterating the whole body (a JSON key) is over the cost budget of an output value, whose body
				// may be 256 KiB (docs/security.md): refused before anything is sent, so no output can carry
				// it. successWhen (a 4 KiB body) still reads it below.
				t.Logf("output %s refused: %v", tc.read, err)
			} else {
				theReaders.hold(mgr, xa, resp, red)
				h := mgr.heldFor(xa)
				if h == nil || h.err != nil {
					t.Fatalf("held %+v", h)
				}
				if v := h.values["echo"]; !strings.Contains(v, redact.Redacted) || strings.Contains(v, tc.leak) ||
					strings.Contains(v, echoSecret) {
					t.Errorf("output echo = %q, want the credential redacted", v)
				}
			}

			ok, err := theReaders.successWhen(exprs, xa, resp, red)
			if err != nil || ok {
				t.Errorf("successWhen %q = %v, %v: it saw the credential", xa.Spec.SuccessWhen, ok, err)
			}
		})
	}
}

// An output expression that fails on a response value is held as the key and the kind of failure, which
// the OutputExpressionFailed condition and Event quote; never the value (issue 23 row 9).
func TestOutputExpressionErrorNeverQuotesTheResponse(t *testing.T) {
	const planted = "PLANTED-3be07a"
	mgr := &Manager{Exprs: expr.NewCache(8)}
	resp := &httpexec.Response{StatusCode: 201, Header: http.Header{}, Body: []byte(`{"id":"` + planted + `","n":551234}`)}
	for _, src := range []string{`{"x":1}[response.body.id]`, `[1][response.body.n]`, `int(response.body.id)`} {
		xa := &actionsv1alpha1.ExternalAction{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "e", UID: "u1"},
			Spec: actionsv1alpha1.ExternalActionSpec{Outputs: &actionsv1alpha1.ActionOutputs{SecretName: "out",
				Values: map[string]actionsv1alpha1.OutputExpression{"x": actionsv1alpha1.OutputExpression(src)}}}}
		theReaders.hold(mgr, xa, resp, nil)
		h := mgr.heldFor(xa)
		if h == nil || h.err == nil {
			t.Fatalf("%s: held %+v, want an error", src, h)
		}
		if msg := h.err.Error(); !strings.Contains(msg, `spec.outputs.values["x"]`) || strings.Contains(msg, planted) ||
			strings.Contains(msg, "551234") {
			t.Errorf("%s: error %q, want the key named and no response value", src, msg)
		}
	}
}
