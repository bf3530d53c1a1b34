package httpexec_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/actionledger/actionledger/internal/httpexec"
	"github.com/actionledger/actionledger/internal/membudget"
)

// halfFrame is the first half of a zstd frame that declares an 8 MiB window (issue 40 row 2).
func halfFrame(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithWindowSize(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 256<<10)
	_, _ = rand.Read(data)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()[:buf.Len()/2]
}

// Issue 40 row 2: a tenant's own destination answers 200, zstd, half of a frame declaring an 8 MiB window, then
// stalls, to many requests at once. Each decoder's window is charged to the tenant's share of the byte budget
// before it opens, so the tenant holds at most half of the budget (the rest of its answers are recorded
// undecoded), and another tenant's compressed answer still decodes meanwhile. Everything is given back after.
func TestDecoderWindowsArePricedPerNamespace(t *testing.T) {
	httpexec.SetBudget(membudget.New(32 << 20))
	defer httpexec.SetBudget(membudget.New(membudget.TotalFromMemoryLimit()))
	frame := halfFrame(t)
	stop := make(chan struct{})
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "zstd")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(frame)
		w.(http.Flusher).Flush()
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer stalled.Close()
	defer close(stop)
	e := executor()
	const n = 16
	var wg sync.WaitGroup
	results := make([]httpexec.Result, n)
	for i := range n {
		wg.Go(func() {
			results[i] = e.Execute(context.Background(), httpexec.Request{Method: http.MethodPost, URL: stalled.URL,
				Body: []byte(`{}`), Timeout: 3 * time.Second, Flow: "team-a"}, 4096)
		})
	}
	// While they stall: team-a holds at most its share, two 8 MiB windows.
	deadline := time.Now().Add(2 * time.Second)
	var maxHeld int64
	for time.Now().Before(deadline) {
		held, _ := httpexec.WindowsHeld("team-a")
		maxHeld = max(maxHeld, held)
		time.Sleep(10 * time.Millisecond)
	}
	if maxHeld == 0 || maxHeld > 16<<20 {
		t.Errorf("team-a held up to %d bytes of decoder windows; want some, at most half of 32 MiB", maxHeld)
	}
	// team-b's compressed answer decodes meanwhile.
	body := []byte(`{"id":"ch_1"}`)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Encoding", "zstd")
		_, _ = w.Write(compress(t, "zstd", body))
	}))
	defer ok.Close()
	res := e.Execute(context.Background(), httpexec.Request{Method: http.MethodPost, URL: ok.URL, Body: []byte(`{}`),
		Timeout: 3 * time.Second, Flow: "team-b"}, 4096)
	if res.Response == nil || !bytes.Equal(res.Response.Body, body) {
		t.Errorf("team-b's answer while team-a stalls: %+v", res.Response)
	}
	wg.Wait()
	undecoded := 0
	for _, r := range results {
		if r.Response != nil && string(r.Response.Body) == httpexec.UndecodedBody {
			undecoded++
		}
	}
	if undecoded < n-2 {
		t.Errorf("%d of team-a's %d stalled answers recorded undecoded; want all but the two that fit", undecoded, n)
	}
	if a, all := httpexec.WindowsHeld("team-a"); a != 0 || all != 0 {
		t.Errorf("after the answers: team-a holds %d, all %d bytes; want 0", a, all)
	}
}
