/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package destination

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type response struct {
	status int
	header http.Header
	body   string
}

func newServer(t *testing.T, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	d := New(opts)
	ts := httptest.NewServer(d)
	t.Cleanup(ts.Close)
	return d, ts
}

// send does one request with a fresh connection, so the transport never retries it on its own.
func send(t *testing.T, ts *httptest.Server, method, path, key, body string) (response, error) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(context.Background(), method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(DefaultKeyHeader, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

func mustSend(t *testing.T, ts *httptest.Server, method, path, key, body string) response {
	t.Helper()
	r, err := send(t, ts, method, path, key, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func decode(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", body, err)
	}
	return m
}

func wantCode(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	if got := decode(t, r.body)["code"]; got != code {
		t.Fatalf("code = %v, want %q", got, code)
	}
}

func TestNormalApplyAndCounts(t *testing.T) {
	d, ts := newServer(t, Options{})
	r := mustSend(t, ts, http.MethodPost, "/charges", "ns/pay-42", `{"amount":100}`)
	if r.status != http.StatusCreated {
		t.Fatalf("status = %d, want 201", r.status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	id := EffectID("ns/pay-42")
	if loc := r.header.Get("Location"); loc != "/effects/"+id {
		t.Fatalf("Location = %q, want /effects/%s", loc, id)
	}
	m := decode(t, r.body)
	if m["id"] != id || m["key"] != "ns/pay-42" || m["path"] != "/charges" || m["method"] != "POST" {
		t.Fatalf("body = %v", m)
	}
	if EffectID("ns/pay-42") != id || EffectID("ns/pay-43") == id {
		t.Fatal("EffectID is not stable per key")
	}
	if got := d.Effects("ns/pay-42"); got != 1 {
		t.Fatalf("Effects = %d, want 1", got)
	}
	if got := d.Requests("ns/pay-42"); got != 1 {
		t.Fatalf("Requests = %d, want 1", got)
	}
	log := d.RequestLog("ns/pay-42")
	if len(log) != 1 {
		t.Fatalf("log has %d entries", len(log))
	}
	e := log[0]
	if e.Method != "POST" || e.Path != "/charges" || string(e.Body) != `{"amount":100}` ||
		e.Header.Get(DefaultKeyHeader) != "ns/pay-42" || e.Status != 201 || !e.Applied || e.At.IsZero() {
		t.Fatalf("log entry = %+v", e)
	}
	// The log is a copy.
	log[0].Header.Set(DefaultKeyHeader, "changed")
	log[0].Body[0] = 'X'
	if e2 := d.RequestLog("ns/pay-42")[0]; e2.Header.Get(DefaultKeyHeader) != "ns/pay-42" || e2.Body[0] != '{' {
		t.Fatal("RequestLog returned shared state")
	}

	// Missing key header.
	r = mustSend(t, ts, http.MethodPost, "/charges", "", `{}`)
	wantCode(t, r, http.StatusBadRequest, CodeMissingKey)
	if d.Requests("") != 1 {
		t.Fatalf("Requests(\"\") = %d", d.Requests(""))
	}

	// Any method on any path, custom key header.
	d2, ts2 := newServer(t, Options{KeyHeader: "X-Request-Key"})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPut, ts2.URL+"/a/b?c=d", nil)
	req.Header.Set("X-Request-Key", "k")
	resp, err := ts2.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 201 || d2.Effects("k") != 1 || d2.RequestLog("k")[0].Query != "c=d" {
		t.Fatalf("custom header: status %d effects %d", resp.StatusCode, d2.Effects("k"))
	}

	// Body limit.
	r = mustSend(t, ts, http.MethodPost, "/big", "big", strings.Repeat("x", MaxBodyBytes+1))
	wantCode(t, r, http.StatusRequestEntityTooLarge, CodeBodyTooLarge)
	if d.Effects("big") != 0 {
		t.Fatal("oversized body applied")
	}
}

func TestNoDedupCountsDuplicate(t *testing.T) {
	d, ts := newServer(t, Options{})
	for range 2 {
		if r := mustSend(t, ts, http.MethodPost, "/charges", "k", `{"amount":100}`); r.status != 201 {
			t.Fatalf("status = %d", r.status)
		}
	}
	if got := d.Effects("k"); got != 2 {
		t.Fatalf("Effects = %d, want 2", got)
	}
	sum := d.Summary()
	if sum.Keys != 1 || sum.Requests != 2 || sum.Applied != 2 || sum.Duplicates != 1 ||
		len(sum.DuplicateKeys) != 1 || sum.DuplicateKeys[0] != "k" {
		t.Fatalf("Summary = %+v", sum)
	}
}

func TestDedupReplay(t *testing.T) {
	d, ts := newServer(t, Options{Dedup: true})
	first := mustSend(t, ts, http.MethodPost, "/charges", "k", `{"amount":100}`)
	if first.status != 201 || first.header.Get(ReplayedHeader) != "" {
		t.Fatalf("first: %d %v", first.status, first.header)
	}
	second := mustSend(t, ts, http.MethodPost, "/charges", "k", `{"amount":100}`)
	if second.status != 201 || second.body != first.body ||
		second.header.Get(ReplayedHeader) != "true" ||
		second.header.Get("Location") != first.header.Get("Location") {
		t.Fatalf("second: %d %v %s", second.status, second.header, second.body)
	}
	if d.Effects("k") != 1 || d.Requests("k") != 2 {
		t.Fatalf("Effects = %d, Requests = %d", d.Effects("k"), d.Requests("k"))
	}
	if log := d.RequestLog("k"); !log[1].Replayed || log[1].Applied {
		t.Fatalf("log[1] = %+v", log[1])
	}
	if sum := d.Summary(); sum.Replayed != 1 || sum.Duplicates != 0 || sum.Applied != 1 {
		t.Fatalf("Summary = %+v", sum)
	}
}

func TestDedupKeyReused(t *testing.T) {
	d, ts := newServer(t, Options{Dedup: true})
	mustSend(t, ts, http.MethodPost, "/charges", "pay-42", `{"amount":100}`)
	wantCode(t, mustSend(t, ts, http.MethodPost, "/charges", "pay-42", `{"amount":200}`),
		http.StatusUnprocessableEntity, CodeKeyReused)
	wantCode(t, mustSend(t, ts, http.MethodPost, "/refunds", "pay-42", `{"amount":100}`),
		http.StatusUnprocessableEntity, CodeKeyReused)
	if d.Effects("pay-42") != 1 || d.Requests("pay-42") != 3 {
		t.Fatalf("Effects = %d, Requests = %d", d.Effects("pay-42"), d.Requests("pay-42"))
	}
}

func TestDedupInProgress(t *testing.T) {
	const delay = 50 * time.Millisecond
	d := New(Options{Dedup: true, CommitDelay: delay})
	reserved := make(chan struct{})
	release := make(chan struct{})
	d.hookCommitting = func(string) {
		close(reserved)
		<-release
	}
	ts := httptest.NewServer(d)
	t.Cleanup(ts.Close)

	type result struct {
		r   response
		err error
		d   time.Duration
	}
	firstDone := make(chan result, 1)
	go func() {
		start := time.Now()
		r, err := send(t, ts, http.MethodPost, "/charges", "slow", `{"amount":1}`)
		firstDone <- result{r, err, time.Since(start)}
	}()
	<-reserved

	// The first is still processing: the repeat is told the key is in use.
	wantCode(t, mustSend(t, ts, http.MethodPost, "/charges", "slow", `{"amount":1}`),
		http.StatusConflict, CodeKeyInUse)
	if d.Effects("slow") != 0 {
		t.Fatal("applied before the commit")
	}
	// A different body is refused as reuse even while in progress.
	wantCode(t, mustSend(t, ts, http.MethodPost, "/charges", "slow", `{"amount":2}`),
		http.StatusUnprocessableEntity, CodeKeyReused)
	if r := mustSend(t, ts, http.MethodGet, "/effects?key=slow", "", ""); r.status != http.StatusNotFound {
		t.Fatalf("post-check while in progress = %d, want 404", r.status)
	}

	close(release)
	res := <-firstDone
	if res.err != nil || res.r.status != 201 {
		t.Fatalf("first: %v %d", res.err, res.r.status)
	}
	if res.d < delay {
		t.Fatalf("first answered after %v, want at least CommitDelay %v", res.d, delay)
	}
	// After the commit the repeat gets the stored 201.
	r := mustSend(t, ts, http.MethodPost, "/charges", "slow", `{"amount":1}`)
	if r.status != 201 || r.header.Get(ReplayedHeader) != "true" || r.body != res.r.body {
		t.Fatalf("after commit: %d %v %s", r.status, r.header, r.body)
	}
	if d.Effects("slow") != 1 || d.Requests("slow") != 4 {
		t.Fatalf("Effects = %d, Requests = %d", d.Effects("slow"), d.Requests("slow"))
	}
}

func TestCommitContinuesAfterClientTimeout(t *testing.T) {
	const delay = 100 * time.Millisecond
	d := New(Options{Dedup: true, CommitDelay: delay})
	committed := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.ServeHTTP(w, r)
		if r.Header.Get(DefaultKeyHeader) != "" {
			close(committed)
		}
	}))
	t.Cleanup(ts.Close)

	ctx, cancel := context.WithTimeout(context.Background(), delay/5)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/charges", strings.NewReader(`{}`))
	req.Header.Set(DefaultKeyHeader, "t")
	if resp, err := ts.Client().Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("expected a client timeout")
	}
	<-committed
	if d.Effects("t") != 1 {
		t.Fatalf("Effects = %d, want 1: the destination commits even when the client gave up", d.Effects("t"))
	}
}

func TestScriptPerKeyAndDefault(t *testing.T) {
	d, ts := newServer(t, Options{})
	d.Script("", Step{Status: 503, Header: map[string]string{"Retry-After": "7"}, Body: `{"code":"busy"}`})
	d.Script("a",
		Step{Status: 500, Body: "boom"},
		Step{Status: 504, Apply: true},
	)
	d.Script("c") // own empty script: exempt from the default

	r := mustSend(t, ts, http.MethodPost, "/x", "a", "")
	if r.status != 500 || r.body != "boom" {
		t.Fatalf("a#1 = %d %q", r.status, r.body)
	}
	if d.Effects("a") != 0 {
		t.Fatal("a#1 applied")
	}
	if r = mustSend(t, ts, http.MethodPost, "/x", "a", ""); r.status != 504 || d.Effects("a") != 1 {
		t.Fatalf("a#2 = %d, effects %d", r.status, d.Effects("a"))
	}
	if r = mustSend(t, ts, http.MethodPost, "/x", "a", ""); r.status != 201 || d.Effects("a") != 2 {
		t.Fatalf("a#3 = %d, effects %d", r.status, d.Effects("a"))
	}

	// Each key without its own script gets its own pass over the default script.
	for _, key := range []string{"b1", "b2"} {
		r = mustSend(t, ts, http.MethodPost, "/x", key, "")
		if r.status != 503 || r.header.Get("Retry-After") != "7" || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s#1 = %d %v", key, r.status, r.header)
		}
		if r = mustSend(t, ts, http.MethodPost, "/x", key, ""); r.status != 201 {
			t.Fatalf("%s#2 = %d", key, r.status)
		}
		if d.Effects(key) != 1 || d.Requests(key) != 2 {
			t.Fatalf("%s: Effects = %d, Requests = %d", key, d.Effects(key), d.Requests(key))
		}
	}
	if r = mustSend(t, ts, http.MethodPost, "/x", "c", ""); r.status != 201 {
		t.Fatalf("c = %d", r.status)
	}

	// Repeat and a delay-only step (normal answer after the delay).
	d.Script("r", append(Repeat(2, Step{Status: 429}), Step{Delay: 30 * time.Millisecond})...)
	for i := range 2 {
		if r = mustSend(t, ts, http.MethodPost, "/x", "r", ""); r.status != 429 {
			t.Fatalf("r#%d = %d", i, r.status)
		}
	}
	start := time.Now()
	if r = mustSend(t, ts, http.MethodPost, "/x", "r", ""); r.status != 201 || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("r#3 = %d after %v", r.status, time.Since(start))
	}
}

func TestScriptApplyWithDedupStoresNormalResponse(t *testing.T) {
	// C03 variant: a proxy answers 504, but the destination committed; the retry gets the 201.
	d, ts := newServer(t, Options{Dedup: true})
	d.Script("k", Step{Status: 504, Apply: true})
	if r := mustSend(t, ts, http.MethodPost, "/x", "k", `{}`); r.status != 504 {
		t.Fatalf("first = %d", r.status)
	}
	r := mustSend(t, ts, http.MethodPost, "/x", "k", `{}`)
	if r.status != 201 || r.header.Get(ReplayedHeader) != "true" || decode(t, r.body)["key"] != "k" {
		t.Fatalf("retry = %d %v %s", r.status, r.header, r.body)
	}
	if d.Effects("k") != 1 {
		t.Fatalf("Effects = %d", d.Effects("k"))
	}
}

func TestCloseConn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dedup bool
		apply bool
	}{
		{"not applied", false, false},
		{"applied", false, true},
		{"applied with dedup", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ts := newServer(t, Options{Dedup: tc.dedup})
			d.Script("k", Step{CloseConn: true, Apply: tc.apply})
			_, err := send(t, ts, http.MethodPost, "/charges", "k", `{"amount":100}`)
			if err == nil {
				t.Fatal("expected a client error after the request was written")
			}
			// The request reached the destination in full before the connection was dropped.
			log := d.RequestLog("k")
			if len(log) != 1 || string(log[0].Body) != `{"amount":100}` || log[0].Status != 0 {
				t.Fatalf("log = %+v", log)
			}
			want := 0
			if tc.apply {
				want = 1
			}
			if d.Effects("k") != want {
				t.Fatalf("Effects = %d, want %d", d.Effects("k"), want)
			}
			// The resend with the same key.
			r := mustSend(t, ts, http.MethodPost, "/charges", "k", `{"amount":100}`)
			if r.status != 201 {
				t.Fatalf("resend = %d", r.status)
			}
			switch {
			case tc.dedup:
				want = 1 // replayed, nothing new applied
				if r.header.Get(ReplayedHeader) != "true" {
					t.Fatal("resend not replayed")
				}
			default:
				want++
			}
			if d.Effects("k") != want || d.Requests("k") != 2 {
				t.Fatalf("after resend: Effects = %d want %d, Requests = %d", d.Effects("k"), want, d.Requests("k"))
			}
		})
	}
}

func TestEffectsAndSummaryEndpoints(t *testing.T) {
	d, ts := newServer(t, Options{})
	key := "ns/name with space&x"
	r := mustSend(t, ts, http.MethodGet, "/effects?key=missing", "", "")
	if r.status != http.StatusNotFound || decode(t, r.body)["applied"] != false {
		t.Fatalf("not applied: %d %s", r.status, r.body)
	}
	wantCode(t, mustSend(t, ts, http.MethodGet, "/effects", "", ""), http.StatusBadRequest, CodeMissingKeyArg)

	mustSend(t, ts, http.MethodPost, "/charges", key, `{}`)
	mustSend(t, ts, http.MethodPost, "/charges", key, `{}`)
	r = mustSend(t, ts, http.MethodGet, strings.TrimPrefix(EffectsURL(ts.URL, key), ts.URL), "", "")
	m := decode(t, r.body)
	if r.status != 200 || m["applied"] != true || m["count"] != float64(2) || m["id"] != EffectID(key) {
		t.Fatalf("applied: %d %s", r.status, r.body)
	}
	// The Location of the effect resolves too.
	r = mustSend(t, ts, http.MethodGet, "/effects/"+EffectID(key), "", "")
	if r.status != 200 || decode(t, r.body)["count"] != float64(2) {
		t.Fatalf("by id: %d %s", r.status, r.body)
	}
	// The post-check is routed before the effect handler even when it carries a key header.
	if r = mustSend(t, ts, http.MethodGet, "/effects?key=x", "x", ""); r.status != 404 || d.Requests("x") != 0 {
		t.Fatalf("post-check with key header: %d, requests %d", r.status, d.Requests("x"))
	}

	d.Script("never", Step{Status: 500})
	mustSend(t, ts, http.MethodPost, "/charges", "never", `{}`)
	mustSend(t, ts, http.MethodPost, "/charges", "", `{}`)
	r = mustSend(t, ts, http.MethodGet, "/_summary", "", "")
	var sum Summary
	if err := json.Unmarshal([]byte(r.body), &sum); err != nil || r.status != 200 {
		t.Fatalf("summary: %d %s %v", r.status, r.body, err)
	}
	want := Summary{Keys: 2, Requests: 4, Applied: 2, Duplicates: 1, Missing: 1, Unkeyed: 1, DuplicateKeys: []string{key}}
	if sum.Keys != want.Keys || sum.Requests != want.Requests || sum.Applied != want.Applied ||
		sum.Duplicates != want.Duplicates || sum.Missing != want.Missing || sum.Unkeyed != want.Unkeyed ||
		len(sum.DuplicateKeys) != 1 || sum.DuplicateKeys[0] != key {
		t.Fatalf("summary = %+v, want %+v", sum, want)
	}

	d.Reset()
	if s := d.Summary(); s.Keys != 0 || s.Requests != 0 || s.Applied != 0 || d.Effects(key) != 0 || d.RequestLog(key) != nil {
		t.Fatalf("after Reset: %+v", s)
	}
	// Scripts are forgotten too.
	if r = mustSend(t, ts, http.MethodPost, "/charges", "never", `{}`); r.status != 201 {
		t.Fatalf("after Reset, scripted key = %d", r.status)
	}
}

func TestConcurrentKeys(t *testing.T) {
	d, ts := newServer(t, Options{Dedup: true})
	const n = 40
	errs := make(chan error, n)
	for i := range n {
		go func() {
			key := "k" + string(rune('a'+i%20))
			_, err := send(t, ts, http.MethodPost, "/x", key, `{}`)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sum := d.Summary()
	if sum.Keys != 20 || sum.Requests != n || sum.Applied != 20 || sum.Duplicates != 0 {
		t.Fatalf("Summary = %+v", sum)
	}
}

// TestTransportResendOnReusedConnIsVisible documents a net/http behaviour the executor must
// defend against: http.Transport treats a request carrying an Idempotency-Key header as
// replayable, so when a reused keep-alive connection is reset after the request was written it
// silently sends the request again and returns the second answer. The client sees one 201, the
// destination applied twice. With GetBody == nil (and a non-empty body) the request is not
// replayable and the caller gets the error instead. If this test fails after a Go upgrade, the
// standard library changed: update this comment and tell the executor owners.
func TestTransportResendOnReusedConnIsVisible(t *testing.T) {
	for _, tc := range []struct {
		name        string
		dropGetBody bool
		wantErr     bool
		wantReqs    int
	}{
		{"GetBody set: silent resend", false, false, 2},
		{"GetBody nil: error surfaces", true, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ts := newServer(t, Options{})
			client := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(client.CloseIdleConnections)
			do := func(key string) (*http.Response, error) {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, ts.URL+"/x", strings.NewReader(`{"a":1}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set(DefaultKeyHeader, key)
				if tc.dropGetBody {
					req.GetBody = nil
				}
				return client.Do(req)
			}
			// Warm one keep-alive connection so the next request reuses it.
			resp, err := do("warm")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()

			d.Script("k", Step{CloseConn: true, Apply: true})
			resp, err = do("k")
			if err == nil {
				_ = resp.Body.Close()
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if d.Requests("k") != tc.wantReqs || d.Effects("k") != tc.wantReqs {
				t.Fatalf("Requests = %d, Effects = %d, want %d", d.Requests("k"), d.Effects("k"), tc.wantReqs)
			}
		})
	}
}
