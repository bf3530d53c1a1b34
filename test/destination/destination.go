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

// Package destination is a real HTTP destination for tests, the chaos run, the benchmark and
// the local demo. It applies an "effect" per request, counts the effects by idempotency key
// (so a duplicate send is visible as a count above one) and can be scripted to answer with
// failures, delays and connection resets.
//
// Routes, checked in this order:
//
//	GET /effects?key=<url-escaped key>  post-check: 200 {"applied":true,"count":N,"id":"..."}
//	                                    or 404 {"applied":false}; no key header needed
//	GET /effects/<id>                   the same, by the id returned in Location
//	GET /_summary                       the Summary as JSON
//	anything else                       the effect handler (any method, any path)
//
// The effect handler reads the body (at most 1 MiB, else 413), requires the key header
// (else 400 {"code":"missing_idempotency_key"}), consumes the next scripted Step for the key if
// there is one, and otherwise behaves normally: it waits CommitDelay, records the effect and
// answers 201 with {"id","key","path","method"} and Location /effects/<id>.
//
// With Options.Dedup the normal behaviour follows the IETF Idempotency-Key draft: the first
// request for a key reserves it; a repeat with the same fingerprint (method, path with query,
// body) after the commit gets the stored response plus "Idempotent-Replayed: true" and applies
// nothing; a different fingerprint gets 422 {"code":"idempotency_key_reused"}; a repeat while
// the first is still being processed gets 409 {"code":"idempotency_key_in_use"}.
//
// The commit does not depend on the client: a client that times out or disconnects during
// CommitDelay (or during the Delay of a scripted step that applies) does not stop the effect,
// exactly like a slow real destination.
package destination

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultKeyHeader is the request header that carries the idempotency key.
	DefaultKeyHeader = "Idempotency-Key"
	// ReplayedHeader is set to "true" on a response replayed from the dedup store.
	ReplayedHeader = "Idempotent-Replayed"
	// MaxBodyBytes is the largest request body the destination reads.
	MaxBodyBytes = 1 << 20

	// Error codes in the JSON body {"code": ...} of the destination's own error answers.
	CodeMissingKey    = "missing_idempotency_key"
	CodeKeyReused     = "idempotency_key_reused"
	CodeKeyInUse      = "idempotency_key_in_use"
	CodeBodyTooLarge  = "body_too_large"
	CodeBadBody       = "bad_body"
	CodeMissingKeyArg = "missing_key"
)

// Options configure a Server.
type Options struct {
	// KeyHeader is the header that carries the idempotency key; default "Idempotency-Key".
	KeyHeader string
	// Dedup makes the destination deduplicate on the key (IETF Idempotency-Key draft).
	Dedup bool
	// CommitDelay is how long the normal handler takes before it commits the effect and answers.
	CommitDelay time.Duration
}

// Step is one scripted answer. Scripted steps for a key are consumed in order, one per
// request, before the normal behaviour applies.
//
//   - Status != 0: wait Delay, apply the effect if Apply, then answer Status with Header and
//     Body (Content-Type application/json is added when Body is JSON and Header sets none).
//   - CloseConn: wait Delay, apply the effect if Apply, then close the connection without
//     answering (TCP reset after the request was fully read). Status is ignored.
//   - Status == 0 and !CloseConn: wait Delay, then the normal behaviour (Apply is ignored,
//     the normal behaviour decides).
//
// With Dedup, a scripted step that applies commits like the normal handler does: if the key
// has no record yet it is reserved during Delay (a concurrent repeat gets 409) and the stored
// response for later replays is the normal 201, not the scripted answer. The scripted answer
// models what reached the client (a proxy's 504, a lost response), the record models what the
// destination did. A scripted step that applies always counts, even when the key was already
// applied: that is how a destination that fails to deduplicate is simulated.
type Step struct {
	Status    int
	Header    map[string]string
	Body      string
	Delay     time.Duration
	Apply     bool
	CloseConn bool
}

// Repeat returns n copies of step, for Script(key, Repeat(n, step)...).
func Repeat(n int, step Step) []Step {
	steps := make([]Step, 0, max(n, 0))
	for range n {
		steps = append(steps, step)
	}
	return steps
}

// Received is one request as the effect handler saw it.
type Received struct {
	Method string
	// Path is the escaped path; Query the raw query string.
	Path   string
	Query  string
	Header http.Header
	Body   []byte
	// At is when the request arrived (before its body was read).
	At time.Time
	// Status is the status answered; 0 while in progress or when the connection was closed
	// without an answer.
	Status int
	// Applied says whether this request applied the effect.
	Applied bool
	// Replayed says whether the answer came from the dedup store.
	Replayed bool
}

// Summary counts what the destination saw, for the chaos run and the benchmark.
type Summary struct {
	// Keys is the number of distinct keys that sent at least one request.
	Keys int `json:"keys"`
	// Requests is the number of requests to the effect handler, with or without a key.
	Requests int `json:"requests"`
	// Applied is the total number of effects applied (a key applied twice counts twice).
	Applied int `json:"applied"`
	// Duplicates is the number of keys applied more than once.
	Duplicates int `json:"duplicates"`
	// Missing is the number of keys that sent requests but were never applied.
	Missing int `json:"missing"`
	// Replayed is the number of answers served from the dedup store.
	Replayed int `json:"replayed"`
	// Unkeyed is the number of requests rejected for a missing key header.
	Unkeyed int `json:"unkeyed"`
	// DuplicateKeys lists the keys applied more than once, sorted.
	DuplicateKeys []string `json:"duplicateKeys,omitempty"`
}

// storedResponse is what the dedup store replays.
type storedResponse struct {
	status int
	header http.Header
	body   []byte
}

// dedupRecord is the dedup state of one key.
type dedupRecord struct {
	fingerprint string
	inProgress  bool
	response    *storedResponse
}

type keyState struct {
	requests  int
	effects   int
	log       []*Received
	ownScript bool
	script    []Step
	// defaultPos is how many steps of the default script this key has consumed.
	defaultPos int
	record     *dedupRecord
}

// Server is the destination. It implements http.Handler and is safe for concurrent use.
type Server struct {
	opts Options

	mu            sync.Mutex
	keys          map[string]*keyState
	ids           map[string]string // effect id -> key
	defaultScript []Step
	requests      int
	replayed      int
	unkeyed       int

	// hookCommitting, when set (tests only), is called after a normal request has reserved its
	// key and before it waits CommitDelay.
	hookCommitting func(key string)
}

// New returns a Server with the given options.
func New(opts Options) *Server {
	if opts.KeyHeader == "" {
		opts.KeyHeader = DefaultKeyHeader
	}
	return &Server{
		opts: opts,
		keys: map[string]*keyState{},
		ids:  map[string]string{},
	}
}

// Options returns the options in effect (with defaults filled in).
func (s *Server) Options() Options { return s.opts }

// EffectID is the short stable id of the effect for key.
func EffectID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "eff_" + hex.EncodeToString(sum[:6])
}

// Script sets the scripted answers for key, replacing any remaining ones. The key "" sets the
// default script: every key without its own script consumes its own pass over the default
// steps (setting the default again restarts that pass for every key). Script(key) with no
// steps gives key an empty own script: normal behaviour, exempt from the default script.
func (s *Server) Script(key string, steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "" {
		s.defaultScript = append([]Step(nil), steps...)
		for _, ks := range s.keys {
			ks.defaultPos = 0
		}
		return
	}
	ks := s.stateLocked(key)
	ks.ownScript = true
	ks.script = append([]Step(nil), steps...)
}

// Effects returns how many times the effect was applied for key (a duplicate is > 1).
func (s *Server) Effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ks := s.keys[key]; ks != nil {
		return ks.effects
	}
	return 0
}

// Requests returns how many requests arrived for key, including replays, rejections and
// scripted answers. Requests("") counts the requests without a key header.
func (s *Server) Requests(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ks := s.keys[key]; ks != nil {
		return ks.requests
	}
	return 0
}

// RequestLog returns copies of the requests received for key, in arrival order.
// RequestLog("") returns the requests without a key header.
func (s *Server) RequestLog(key string) []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.keys[key]
	if ks == nil {
		return nil
	}
	out := make([]Received, len(ks.log))
	for i, r := range ks.log {
		out[i] = *r
		out[i].Header = r.Header.Clone()
		out[i].Body = bytes.Clone(r.Body)
	}
	return out
}

// Arrivals returns the times the requests for key arrived, in arrival order (noisy.Stages).
func (s *Server) Arrivals(key string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Time
	if ks := s.keys[key]; ks != nil {
		for _, r := range ks.log {
			out = append(out, r.At)
		}
	}
	return out
}

// Summary returns the counts over every key.
func (s *Server) Summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := Summary{Requests: s.requests, Replayed: s.replayed, Unkeyed: s.unkeyed}
	for key, ks := range s.keys {
		if key == "" || ks.requests == 0 {
			continue
		}
		sum.Keys++
		sum.Applied += ks.effects
		switch {
		case ks.effects == 0:
			sum.Missing++
		case ks.effects > 1:
			sum.Duplicates++
			sum.DuplicateKeys = append(sum.DuplicateKeys, key)
		}
	}
	slices.Sort(sum.DuplicateKeys)
	return sum
}

// Reset forgets every request, effect, dedup record and script. Requests still in progress
// finish against the new, empty state.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = map[string]*keyState{}
	s.ids = map[string]string{}
	s.defaultScript = nil
	s.requests, s.replayed, s.unkeyed = 0, 0, 0
}

// ServeHTTP routes the post-check and summary endpoints, then the effect handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		switch {
		case r.URL.Path == "/effects":
			s.serveEffectByKey(w, r)
			return
		case strings.HasPrefix(r.URL.Path, "/effects/") && !strings.Contains(r.URL.Path[len("/effects/"):], "/"):
			s.serveEffectByID(w, r.URL.Path[len("/effects/"):])
			return
		case r.URL.Path == "/_summary":
			writeJSON(w, http.StatusOK, s.Summary())
			return
		}
	}
	s.serveEffect(w, r)
}

func (s *Server) serveEffectByKey(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("key") || q.Get("key") == "" {
		writeJSON(w, http.StatusBadRequest, errorBody{Code: CodeMissingKeyArg})
		return
	}
	s.answerEffect(w, q.Get("key"))
}

func (s *Server) serveEffectByID(w http.ResponseWriter, id string) {
	s.mu.Lock()
	key, ok := s.ids[id]
	s.mu.Unlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, effectStatus{Applied: false})
		return
	}
	s.answerEffect(w, key)
}

type effectStatus struct {
	Applied bool   `json:"applied"`
	Count   int    `json:"count,omitempty"`
	ID      string `json:"id,omitempty"`
}

func (s *Server) answerEffect(w http.ResponseWriter, key string) {
	n := s.Effects(key)
	if n == 0 {
		writeJSON(w, http.StatusNotFound, effectStatus{Applied: false})
		return
	}
	writeJSON(w, http.StatusOK, effectStatus{Applied: true, Count: n, ID: EffectID(key)})
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

type effectBody struct {
	ID     string `json:"id"`
	Key    string `json:"key"`
	Path   string `json:"path"`
	Method string `json:"method"`
}

// stateLocked returns the state of key, creating it. s.mu must be held.
func (s *Server) stateLocked(key string) *keyState {
	ks := s.keys[key]
	if ks == nil {
		ks = &keyState{}
		s.keys[key] = ks
	}
	return ks
}

// nextStepLocked pops the next scripted step for ks. s.mu must be held.
func (s *Server) nextStepLocked(ks *keyState) (Step, bool) {
	if ks.ownScript {
		if len(ks.script) == 0 {
			return Step{}, false
		}
		st := ks.script[0]
		ks.script = ks.script[1:]
		return st, true
	}
	if ks.defaultPos < len(s.defaultScript) {
		st := s.defaultScript[ks.defaultPos]
		ks.defaultPos++
		return st, true
	}
	return Step{}, false
}

// request is one request in the effect handler after its body was read.
type request struct {
	key         string
	fingerprint string
	rec         *Received
	state       *keyState
}

func (s *Server) serveEffect(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	key := r.Header.Get(s.opts.KeyHeader)
	rec := &Received{
		Method: r.Method,
		Path:   r.URL.EscapedPath(),
		Query:  r.URL.RawQuery,
		Header: r.Header.Clone(),
		Body:   body,
		At:     at,
	}

	s.mu.Lock()
	s.requests++
	ks := s.stateLocked(key)
	ks.requests++
	ks.log = append(ks.log, rec)
	var (
		step     Step
		scripted bool
	)
	switch {
	case key == "":
		s.unkeyed++
	case readErr == nil:
		step, scripted = s.nextStepLocked(ks)
	}
	s.mu.Unlock()

	if readErr != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](readErr); tooLarge {
			s.answer(w, rec, http.StatusRequestEntityTooLarge, nil, mustJSON(errorBody{Code: CodeBodyTooLarge}))
			return
		}
		s.answer(w, rec, http.StatusBadRequest, nil, mustJSON(errorBody{Code: CodeBadBody, Message: readErr.Error()}))
		return
	}
	if key == "" {
		s.answer(w, rec, http.StatusBadRequest, nil, mustJSON(errorBody{Code: CodeMissingKey}))
		return
	}

	req := &request{key: key, fingerprint: fingerprint(r, body), rec: rec, state: ks}
	if scripted && (step.Status != 0 || step.CloseConn) {
		s.serveScripted(w, r, req, step)
		return
	}
	if scripted && step.Delay > 0 {
		sleep(step.Delay)
	}
	s.serveNormal(w, r, req)
}

// serveNormal is the behaviour after the script: dedup (if on), commit, 201.
func (s *Server) serveNormal(w http.ResponseWriter, r *http.Request, req *request) {
	var record *dedupRecord
	if s.opts.Dedup {
		s.mu.Lock()
		switch prev := req.state.record; {
		case prev == nil:
			record = &dedupRecord{fingerprint: req.fingerprint, inProgress: true}
			req.state.record = record
		case prev.fingerprint != req.fingerprint:
			s.mu.Unlock()
			s.answer(w, req.rec, http.StatusUnprocessableEntity, nil, mustJSON(errorBody{
				Code:    CodeKeyReused,
				Message: "the idempotency key was already used with a different request",
			}))
			return
		case prev.inProgress:
			s.mu.Unlock()
			s.answer(w, req.rec, http.StatusConflict, nil, mustJSON(errorBody{
				Code:    CodeKeyInUse,
				Message: "a request with this idempotency key is still being processed",
			}))
			return
		default:
			stored := prev.response
			s.replayed++
			req.rec.Replayed = true
			s.mu.Unlock()
			h := stored.header.Clone()
			h.Set(ReplayedHeader, "true")
			s.answer(w, req.rec, stored.status, h, stored.body)
			return
		}
		s.mu.Unlock()
	}

	if s.hookCommitting != nil {
		s.hookCommitting(req.key)
	}
	sleep(s.opts.CommitDelay)

	resp := normalResponse(r, req.key)
	s.mu.Lock()
	s.applyLocked(req)
	if record != nil {
		record.inProgress = false
		record.response = resp
	}
	s.mu.Unlock()
	s.answer(w, req.rec, resp.status, resp.header, resp.body)
}

// serveScripted answers with a scripted Status or closes the connection.
func (s *Server) serveScripted(w http.ResponseWriter, r *http.Request, req *request, step Step) {
	var owned *dedupRecord
	if step.Apply && s.opts.Dedup {
		s.mu.Lock()
		if req.state.record == nil {
			owned = &dedupRecord{fingerprint: req.fingerprint, inProgress: true}
			req.state.record = owned
		}
		s.mu.Unlock()
	}

	sleep(step.Delay)

	if step.Apply {
		resp := normalResponse(r, req.key)
		s.mu.Lock()
		s.applyLocked(req)
		if owned != nil {
			owned.inProgress = false
			owned.response = resp
		}
		s.mu.Unlock()
	}

	if step.CloseConn {
		resetConnection(w)
		return
	}

	h := http.Header{}
	for k, v := range step.Header {
		h.Set(k, v)
	}
	if h.Get("Content-Type") == "" && step.Body != "" && json.Valid([]byte(step.Body)) {
		h.Set("Content-Type", "application/json")
	}
	s.answer(w, req.rec, step.Status, h, []byte(step.Body))
}

// applyLocked records one effect for req. s.mu must be held.
func (s *Server) applyLocked(req *request) {
	req.state.effects++
	req.rec.Applied = true
	s.ids[EffectID(req.key)] = req.key
}

// answer writes the response and records its status in the request log.
func (s *Server) answer(w http.ResponseWriter, rec *Received, status int, h http.Header, body []byte) {
	s.mu.Lock()
	rec.Status = status
	s.mu.Unlock()
	for k, vs := range h {
		w.Header()[k] = append([]string(nil), vs...)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// resetConnection closes the client connection without an answer, with a TCP reset where
// possible. When the connection cannot be hijacked (HTTP/2), the handler is aborted instead,
// which resets the stream.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func normalResponse(r *http.Request, key string) *storedResponse {
	id := EffectID(key)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Location", "/effects/"+id)
	return &storedResponse{
		status: http.StatusCreated,
		header: h,
		body:   mustJSON(effectBody{ID: id, Key: key, Path: r.URL.Path, Method: r.Method}),
	}
}

// fingerprint identifies the request for the dedup check: method, path with query, body.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	_, _ = io.WriteString(h, r.Method+"\n"+r.URL.EscapedPath()+"?"+r.URL.RawQuery+"\n")
	_, _ = h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(v))
}

// EffectsURL returns the post-check URL for key on a destination at base (e.g. the URL of an
// httptest.Server).
func EffectsURL(base, key string) string {
	return strings.TrimSuffix(base, "/") + "/effects?key=" + url.QueryEscape(key)
}

// CountingListener counts the connections it accepts. A dial that the manager's egress policy denies is
// refused before connect, so it never reaches Accept: tests compare Accepted with the requests they expect.
type CountingListener struct {
	net.Listener
	accepted atomic.Int64
}

// Accept accepts the next connection and counts it.
func (l *CountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// Accepted is the number of connections accepted so far.
func (l *CountingListener) Accepted() int64 { return l.accepted.Load() }
