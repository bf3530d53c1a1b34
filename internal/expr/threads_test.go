package expr

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// threadNice is the nice value of the calling OS thread (Linux: /proc/thread-self/stat, field 19). It may run
// on an evaluation thread, so it reports errors instead of ending the goroutine (t.Fatal, t.Skip).
func threadNice() (int, error) {
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // field 3 (state) on
	if len(fields) <= 19-3 {
		return 0, fmt.Errorf("no field 19 in %q", s)
	}
	return strconv.Atoi(fields[19-3])
}

// Slotted evaluations run on background threads, at nice SlotNice, and give way to everything else at the normal
// priority (issue 40 item 6); quick ones run in the caller's goroutine. A panic on a background thread reaches
// the caller.
func TestSlottedEvaluationsRunAtBackgroundPriority(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a thread's own nice value is Linux's")
	}
	runtime.LockOSThread() // this goroutine's thread, to read its nice value before and after
	defer runtime.UnlockOSThread()
	before, err := threadNice()
	if err != nil {
		t.Skipf("no nice value of a thread here: %v", err)
	}
	var on int
	var onErr error
	evalThreads.run(func() { on, onErr = threadNice() })
	if onErr != nil || on != SlotNice {
		t.Errorf("an evaluation thread runs at nice %d (%v), want %d", on, onErr, SlotNice)
	}
	if after, err := threadNice(); err != nil || after != before {
		t.Errorf("the caller's thread went from nice %d to %d (%v)", before, after, err)
	}

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v in the caller, want the evaluation's panic", r)
			}
		}()
		evalThreads.run(func() { panic("boom") })
	}()

	in := Response{StatusCode: 201, Header: http.Header{}, Body: []byte(`{}`)}
	for _, c := range []struct {
		src    string
		thread bool
	}{{`response.statusCode == 201`, false}, {slotted, true}} {
		p, err := Compile(c.src)
		if err != nil {
			t.Fatal(err)
		}
		n := evalThreads.runs.Load()
		ok, err := p.EvalContext(t.Context(), in)
		if err != nil || !ok {
			t.Fatalf("%s: %v, %v", c.src, ok, err)
		}
		if got := evalThreads.runs.Load() - n; got != map[bool]int64{true: 1, false: 0}[c.thread] {
			t.Errorf("%s: %d runs on a background thread, want slotted=%v", c.src, got, c.thread)
		}
	}
	v, err := CompileValue(`response.statusCode`)
	if err != nil {
		t.Fatal(err)
	}
	n := evalThreads.runs.Load()
	if s, err := v.EvalString(t.Context(), in); err != nil || s != "201" {
		t.Fatalf("output: %q, %v", s, err)
	}
	if evalThreads.runs.Load() != n+1 {
		t.Errorf("an output value did not run on a background thread")
	}
}
