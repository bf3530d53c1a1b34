package noisy

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// Bodies team-a's predicate destinations answer (issue 40 row 5): 4,088 bytes in a JSON string, the largest a
// 4 KiB predicate body holds, as ASCII and as invalid UTF-8.
var (
	ASCIIBody   = `{"s":"` + strings.Repeat("a", 4088) + `"}`
	InvalidBody = `{"s":"` + strings.Repeat("\xff", 4088) + `"}`
)

// Servers are team-a's destinations, each an httptest server on 127.0.0.1: the test's own process, so nothing
// leaves the machine.
type Servers struct {
	// ASCII and Invalid answer 200 with ASCIIBody and InvalidBody at once. A path under /refused answers the
	// same and is counted in RefusedRequests (the refused shapes' destination: it must see none).
	ASCII, Invalid string
	// Zstd and Brotli answer a POST with 200, Content-Encoding zstd (an 8 MiB window) or br (a 16 MiB window),
	// half of the compressed frame, then stall until the client gives up; a GET (the post-check) is answered
	// 200 with InvalidBody at once.
	Zstd, Brotli string
	// Trickle answers 200 with two 8 KiB headers (X-H, X-Hb) and a JSON body of TrickleBytes, written in 64 KiB
	// chunks over TrickleTime.
	Trickle string

	// RefusedRequests counts the requests under /refused; RefusedSeen names them (method and path).
	RefusedRequests atomic.Int64
	refusedSeen     []string
	// Requests counts every request by server: ascii, invalid, zstd, brotli, trickle.
	mu       sync.Mutex
	requests map[string]int
	open     map[string]int // requests being answered now
	maxOpen  map[string]int // the most at once

	stop    chan struct{}
	servers []*httptest.Server
}

// TrickleTime is how long the trickled body takes.
const TrickleTime = 10 * time.Second

// StartServers starts team-a's servers; Close stops them (it ends the stalls first).
func StartServers(trickleBytes int) (*Servers, error) {
	s := &Servers{stop: make(chan struct{}), requests: map[string]int{}, open: map[string]int{}, maxOpen: map[string]int{}}
	zhalf, err := halfZstd()
	if err != nil {
		return nil, err
	}
	bhalf, err := halfBrotli()
	if err != nil {
		return nil, err
	}
	s.ASCII = s.start("ascii", s.fixed(ASCIIBody))
	s.Invalid = s.start("invalid", s.fixed(InvalidBody))
	s.Zstd = s.start("zstd", s.stall("zstd", zhalf))
	s.Brotli = s.start("brotli", s.stall("br", bhalf))
	s.Trickle = s.start("trickle", s.trickle(trickleBytes))
	return s, nil
}

func (s *Servers) start(name string, h http.HandlerFunc) string {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[name]++
		s.open[name]++
		s.maxOpen[name] = max(s.maxOpen[name], s.open[name])
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.open[name]--
			s.mu.Unlock()
		}()
		h(w, r)
	}))
	ts.Config.ReadHeaderTimeout = 10 * time.Second
	ts.Start()
	s.servers = append(s.servers, ts)
	return ts.URL
}

// Close ends every stall and trickle, then stops the servers.
func (s *Servers) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	for _, ts := range s.servers {
		ts.CloseClientConnections()
		ts.Close()
	}
}

// Counts returns the requests each server received and the most it answered at once.
func (s *Servers) Counts() (requests, maxOpen map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.requests), maps.Clone(s.maxOpen)
}

// RefusedSeen names the requests under /refused (method and path).
func (s *Servers) RefusedSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refusedSeen)
}

// WaitBurst waits until team-a is in full swing (a quarter of each predicate burst answered, every answer judged
// by a worst admitted predicate, so the slots are full; the stalls and trickles at their maxInFlight), at most
// timeout, and describes the counts then.
func (s *Servers) WaitBurst(l Load, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		req, open := s.Counts()
		if (req["ascii"] >= l.PredicateBurst/4 && req["invalid"] >= l.PredicateBurst/4 && req["zstd"] >= l.Stalls &&
			req["brotli"] >= l.Stalls && req["trickle"] >= l.Trickles) || time.Now().After(deadline) {
			return fmt.Sprintf("requests %v, most at once %v", req, open)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *Servers) fixed(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/refused") {
			s.RefusedRequests.Add(1)
			s.mu.Lock()
			s.refusedSeen = append(s.refusedSeen, r.Method+" "+r.URL.Path)
			s.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(body))
	}
}

func (s *Servers) stall(coding string, half []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(InvalidBody))
			return
		}
		w.Header().Set("Content-Encoding", coding)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(half)
		w.(http.Flusher).Flush()
		select {
		case <-s.stop:
		case <-r.Context().Done():
		}
	}
}

func (s *Servers) trickle(size int) http.HandlerFunc {
	long := strings.Repeat("b", 8192)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-H", long)
		w.Header().Set("X-Hb", strings.Repeat("a", 8192))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"s":"`))
		const chunk = 64 << 10
		buf := bytes.Repeat([]byte("a"), chunk)
		chunks := max(size/chunk, 1)
		tick := time.NewTicker(TrickleTime / time.Duration(chunks))
		defer tick.Stop()
		for range chunks {
			if _, err := w.Write(buf); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-s.stop:
				return
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
		_, _ = w.Write([]byte(`"}`))
	}
}

// halfZstd is the first half of a zstd frame of 256 KiB of noise that declares an 8 MiB window.
func halfZstd() ([]byte, error) {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(8<<20))
	if err != nil {
		return nil, err
	}
	_, _ = zw.Write(noise())
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes()[:buf.Len()/2], nil
}

// halfBrotli is the first half of a brotli stream of 256 KiB of noise with a 16 MiB window (lgwin 24).
func halfBrotli() ([]byte, error) {
	var buf bytes.Buffer
	bw := brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: 1, LGWin: 24})
	_, _ = bw.Write(noise())
	if err := bw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes()[:buf.Len()/2], nil
}

func noise() []byte {
	b := make([]byte, 256<<10)
	_, _ = rand.Read(b)
	return b
}
