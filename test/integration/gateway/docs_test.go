package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	actionsv1alpha1 "github.com/actionledger/actionledger/api/v1alpha1"
	"github.com/actionledger/actionledger/test/destination"
	"github.com/actionledger/actionledger/test/envtestutil"
)

// example is one curl command of a doc's transcript and the answer the doc shows for it.
type example struct {
	line     int               // where the command starts in the doc
	auth     bool              // gw (with the caller's token) rather than plain curl
	method   string            // POST with -d, else GET
	url      string            // as written, with $G
	headers  map[string]string // -H
	body     string            // -d
	later    bool              // "# a few seconds later": the answer is awaited
	waitTomb bool              // the prose says the object was collected: its tombstone answers
	status   int               // the doc's answer: status code, headers (Date and Content-Length left out), body
	want     http.Header
	wantBody string
}

// gatewayExamples reads the ```console transcripts under "## Examples (curl)" of docs/gateway.md.
func gatewayExamples(t *testing.T) []example {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	var out []example
	in, console, prose := false, false, ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "## "):
			in = l == "## Examples (curl)"
		case !in:
		case l == "```console":
			console = true
		case console && l == "```":
			console, prose = false, ""
		case console && strings.HasPrefix(l, "$ "):
			cmd, start := strings.TrimPrefix(l, "$ "), i+1
			for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
				i++
				cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i])
			}
			ex := parseCurl(t, start, cmd)
			ex.waitTomb = strings.Contains(prose, "was collected")
			i = readAnswer(t, lines, i+1, &ex)
			out = append(out, ex)
		case !console:
			prose += l + "\n"
		}
	}
	return out
}

// parseCurl parses one command line of a transcript: gw or curl with -H, -d and a URL; a # starts a comment.
func parseCurl(t *testing.T, line int, cmd string) example {
	t.Helper()
	ex := example{line: line, method: http.MethodGet, headers: map[string]string{}}
	words := shellWords(cmd)
	for i := 0; i < len(words); i++ {
		switch w := words[i]; {
		case w == "gw":
			ex.auth = true
		case w == "curl" || w == "-s" || w == "-i":
		case w == "--cacert" || w == "-H" && strings.HasPrefix(words[i+1], "Authorization:"):
			i++
		case w == "-H":
			k, v, _ := strings.Cut(words[i+1], ":")
			ex.headers[k] = strings.TrimSpace(v)
			i++
		case w == "-d":
			ex.method, ex.body = http.MethodPost, words[i+1]
			i++
		case strings.HasPrefix(w, "#"):
			ex.later = strings.Contains(cmd[strings.Index(cmd, "#"):], "later")
			i = len(words)
		default:
			ex.url = w
		}
	}
	if ex.url == "" {
		t.Fatalf("docs/gateway.md:%d: no URL in %q", line, cmd)
	}
	return ex
}

// shellWords splits s as sh would for the transcripts: blanks separate words; '...' and "..." quote.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	word := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, word = r, true
		case r == ' ' || r == '\t':
			if word {
				out = append(out, cur.String())
				cur.Reset()
				word = false
			}
		default:
			cur.WriteRune(r)
			word = true
		}
	}
	if word {
		out = append(out, cur.String())
	}
	return out
}

// readAnswer reads the status line, headers and body that follow a command, up to the next command or the end
// of the block, and returns the index of the answer's last line.
func readAnswer(t *testing.T, lines []string, i int, ex *example) int {
	t.Helper()
	f := strings.Fields(lines[i])
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		t.Fatalf("docs/gateway.md:%d: want a status line, got %q", i+1, lines[i])
	}
	ex.status, _ = strconv.Atoi(f[1])
	ex.want = http.Header{}
	for i++; i < len(lines) && lines[i] != "" && lines[i] != "```"; i++ {
		k, v, _ := strings.Cut(lines[i], ":")
		ex.want.Add(k, strings.TrimSpace(v))
	}
	var body []string
	for ; i+1 < len(lines) && lines[i+1] != "```" && !strings.HasPrefix(lines[i+1], "$ "); i++ {
		body = append(body, lines[i+1])
	}
	ex.wantBody = strings.TrimSpace(strings.Join(body, "\n"))
	return i
}

// stableHeaders are compared by value (with the namespace substituted); the others by name only.
var stableHeaders = []string{"Actionledger-Action", "Actionledger-Phase", "Actionledger-Replayed-From",
	"Actionledger-Body-Truncated", "Content-Type", "Idempotent-Replayed", "Preference-Applied", "Www-Authenticate"}

var phaseField = regexp.MustCompile(`"phase":"([A-Za-z]+)"`)

// mismatch compares an answer with the doc's; "" when it matches.
func (ex *example) mismatch(ns string, got answer) string {
	var diffs []string
	if got.status != ex.status {
		diffs = append(diffs, "status "+strconv.Itoa(got.status)+", doc "+strconv.Itoa(ex.status))
	}
	names := func(h http.Header) []string {
		var out []string
		for k := range h {
			if k != "Date" && k != "Content-Length" {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	if g, w := names(got.header), names(ex.want); !slices.Equal(g, w) {
		diffs = append(diffs, "headers "+strings.Join(g, ",")+"; doc "+strings.Join(w, ","))
	}
	for _, k := range stableHeaders {
		if w := strings.ReplaceAll(ex.want.Get(k), "/namespaces/default/", "/namespaces/"+ns+"/"); w != "" && got.header.Get(k) != w {
			diffs = append(diffs, k+": "+got.header.Get(k)+", doc "+w)
		}
	}
	if (ex.wantBody == "") != (got.body == "") {
		diffs = append(diffs, "body "+strconv.Quote(got.body)+", doc "+strconv.Quote(ex.wantBody))
	}
	var w, g map[string]any
	if json.Unmarshal([]byte(ex.wantBody), &w) == nil && json.Unmarshal([]byte(got.body), &g) == nil {
		for _, k := range []string{"type", "status", "reason", "phase", "key", "path", "method"} {
			if gv, wv := g[k], w[k]; wv != nil && k != "key" && gv != wv {
				diffs = append(diffs, "body "+k+" "+strconv.Quote(toString(gv))+", doc "+strconv.Quote(toString(wv)))
			}
		}
	} else if m := phaseField.FindStringSubmatch(ex.wantBody); m != nil && !strings.Contains(got.body, m[0]) {
		diffs = append(diffs, "body without "+m[0])
	}
	return strings.Join(diffs, "; ")
}

func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// send runs the example against gateway 0 in ns with the caller's token tok.
func (ex *example) send(t *testing.T, ns, tok string) answer {
	t.Helper()
	u := strings.ReplaceAll(ex.url, "$G", "https://127.0.0.1:9443/v1/namespaces/default")
	u = strings.Replace(u, "https://127.0.0.1:9443", gateways[0], 1)
	u = strings.Replace(u, "/namespaces/default/", "/namespaces/"+ns+"/", 1)
	hr, err := http.NewRequestWithContext(context.Background(), ex.method, u, strings.NewReader(ex.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range ex.headers {
		hr.Header.Set(k, v)
	}
	if ex.body != "" && hr.Header.Get("Content-Type") == "" {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded") // what curl -d sends
	}
	if ex.auth {
		hr.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("docs/gateway.md:%d: %v", ex.line, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// The curl transcripts of docs/gateway.md, sent in order as written (the namespace default and the sample
// Destinations demo and slow-gw made in a test namespace, demo's objects collected after 3 s), answer what the
// doc shows: the status code, the same header names (Date and Content-Length left out, as the doc says), the
// values of the headers that do not vary, and the body's problem type, reason and phase. The gateway command
// of docs/getting-started.md is the doc's first example.
func TestDocExamples(t *testing.T) {
	ns := env.Namespace(t)
	_, demoURL := envtestutil.DestinationServer(t, destination.Options{})
	env.CreateDestination(t, ns, "demo", demoURL, func(s *actionsv1alpha1.DestinationSpec) {
		s.Retention = &actionsv1alpha1.Retention{TTLAfterFinished: &metav1.Duration{Duration: 3 * time.Second}}
	})
	_, slowURL := envtestutil.DestinationServer(t, destination.Options{CommitDelay: 5 * time.Second})
	env.CreateDestination(t, ns, "slow-gw", slowURL, nil)
	tok := caller(t, ns, "checkout", "create", "get")

	examples := gatewayExamples(t)
	if len(examples) < 10 {
		t.Fatalf("%d examples read from docs/gateway.md, want every transcript (at least 10)", len(examples))
	}
	checkGettingStarted(t, examples[0])
	for _, ex := range examples {
		if ex.waitTomb {
			key := strings.Trim(ex.headers["Idempotency-Key"], `"`)
			envtestutil.Eventually(t, 60*time.Second, envtestutil.Say(key+" answered from its tombstone"), func() bool {
				g := do(t, req{method: http.MethodGet, path: "/v1/namespaces/" + ns + "/actions/" + key, token: tok})
				return g.status == http.StatusOK && strings.Contains(g.body, `"tombstone":true`)
			})
		}
		got := ex.send(t, ns, tok)
		if ex.later {
			envtestutil.Eventually(t, 30*time.Second, envtestutil.Say("the answer at docs/gateway.md:"+strconv.Itoa(ex.line)), func() bool {
				got = ex.send(t, ns, tok)
				return ex.mismatch(ns, got) == ""
			})
		}
		if d := ex.mismatch(ns, got); d != "" {
			t.Errorf("docs/gateway.md:%d: %s %s: %s\n(got %d %v %s)", ex.line, ex.method, ex.url, d, got.status, got.header, got.body)
		}
	}
}

// checkGettingStarted finds the gateway command of docs/getting-started.md and requires it to be the request of
// first (same method, path, headers and body), so that what it promises is what TestDocExamples checks.
func checkGettingStarted(t *testing.T, first example) {
	t.Helper()
	f, err := os.Open(filepath.Join(envtestutil.RepoRoot(), "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	cmd, n, start := "", 0, 0
	for sc.Scan() {
		n++
		l := strings.TrimSpace(sc.Text())
		if cmd == "" && (!strings.HasPrefix(l, "curl ") || !strings.Contains(l, "Idempotency-Key")) {
			continue
		}
		if cmd == "" {
			start = n
		}
		cmd += strings.TrimSuffix(l, `\`) + " "
		if !strings.HasSuffix(l, `\`) {
			break
		}
	}
	if cmd == "" {
		t.Fatal("docs/getting-started.md: no gateway curl command found")
	}
	gs := parseCurl(t, start, cmd)
	path := func(u string) string {
		_, p, _ := strings.Cut(strings.ReplaceAll(u, "$G", "https://127.0.0.1:9443/v1/namespaces/default"), "/v1/")
		return p
	}
	if gs.method != first.method || path(gs.url) != path(first.url) || gs.body != first.body || !maps.Equal(gs.headers, first.headers) {
		t.Errorf("docs/getting-started.md:%d sends %s %s %v %q; docs/gateway.md:%d shows the answer to %s %s %v %q",
			start, gs.method, gs.url, gs.headers, gs.body, first.line, first.method, first.url, first.headers, first.body)
	}
}
