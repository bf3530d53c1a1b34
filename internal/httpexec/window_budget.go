package httpexec

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Decoder windows: the bytes a tenant's answer makes the manager hold while a compressed body is decoded. A
// zstd frame declares its window (up to 8 MiB here), a brotli stream its own (up to 16 MiB), and the decoder
// allocates it at once, before a byte of the body is decoded; a destination that answers a compressed frame and
// then stalls holds it for the attempt's whole timeout. So every window is priced before its decoder opens
// (DESIGN rule 13): its declared size is taken from one process-wide budget (SetWindowBudget), of which one
// namespace (Request.Flow) may hold at most a quarter at once. A window that does not fit is not opened: the
// body is recorded as undecoded (UndecodedBody, ClassContentEncoding), as a coding the executor does not know
// is; the status code and headers are kept. Every request asks for the identity coding, so only a destination
// that compresses against the request pays for this.

// Window budget defaults and bounds, in bytes.
const (
	// DefaultWindowBudget is the budget when the container's memory limit is unknown (64 MiB).
	DefaultWindowBudget = 64 << 20
	// minWindowBudget is the least budget derived from a memory limit: one zstd window and one brotli window.
	minWindowBudget = 24 << 20
	// flateWindow is what a gzip or deflate decoder is charged: its 32 KiB window and its tables.
	flateWindow = 64 << 10
	// windowShare is the part of the budget one flow may hold at once (1/windowShare).
	windowShare = 4
)

// errWindowBudget: the window a compressed body declares does not fit in its flow's share of the budget now.
var errWindowBudget = errors.New("the decoder window the response declares does not fit in the manager's budget for decoder windows")

// windowBudget is the process-wide budget of decoder windows, with a cap per flow.
type windowBudget struct {
	mu     sync.Mutex
	total  int64
	used   int64
	byFlow map[string]int64
}

var windows = newWindowBudget(WindowBudgetFromMemoryLimit())

func newWindowBudget(total int64) *windowBudget {
	return &windowBudget{total: total, byFlow: map[string]int64{}}
}

// SetWindowBudget sets the bytes all decoder windows may hold at once (the manager's --decoder-window-budget);
// total < 1 means WindowBudgetFromMemoryLimit. Call it before any request.
func SetWindowBudget(total int64) {
	if total < 1 {
		total = WindowBudgetFromMemoryLimit()
	}
	windows = newWindowBudget(total)
}

// WindowBudget returns the bytes all decoder windows may hold at once.
func WindowBudget() int64 { return windows.total }

// WindowBudgetFromMemoryLimit is an eighth of the container's memory limit (cgroup v2 memory.max, or v1
// memory.limit_in_bytes), at least 24 MiB; DefaultWindowBudget (64 MiB) without a limit. With the chart's 512 MiB
// limit: 64 MiB.
func WindowBudgetFromMemoryLimit() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f) //nolint:gosec // G304: fixed paths
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<50 { // "max", or v1's "no limit" (a huge number)
			return DefaultWindowBudget
		}
		return max(n/8, minWindowBudget)
	}
	return DefaultWindowBudget
}

// take charges n bytes to flow: ok false, nothing charged, when they do not fit in the budget or in the flow's
// share of it.
func (b *windowBudget) take(flow string, n int64) (release func(), ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.total || b.byFlow[flow]+n > b.total/windowShare {
		return nil, false
	}
	b.used += n
	b.byFlow[flow] += n
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.used -= n
			if b.byFlow[flow] -= n; b.byFlow[flow] <= 0 {
				delete(b.byFlow, flow)
			}
		})
	}, true
}

// declaredWindow is the window, in bytes, that the stream br begins with declares for coding: a zstd frame's
// window (its header; at most maxZstdWindow is accepted by the decoder anyway), a brotli stream's WBITS (RFC
// 7932 section 9.1), flateWindow for gzip and deflate. A header that cannot be read is charged the coding's
// largest window.
func declaredWindow(br *bufio.Reader, coding string) int64 {
	switch coding {
	case codingZstd:
		head, _ := br.Peek(zstd.HeaderMaxSize)
		var h zstd.Header
		if err := h.Decode(head); err != nil || h.WindowSize == 0 {
			return maxZstdWindow
		}
		return int64(min(h.WindowSize, maxZstdWindow))
	case codingBrotli:
		head, err := br.Peek(1)
		if err != nil {
			return 1 << 24
		}
		return int64(1) << brotliWBits(head[0])
	}
	return flateWindow
}

// brotliWBits is the WBITS of a brotli stream's first byte (RFC 7932 section 9.1): 16 when its lowest bit is 0;
// else 17+n for the next three bits n when not 0; else 8+m for the three bits m after them when not 0, and 17
// when they are 0 too.
func brotliWBits(b byte) uint {
	if b&1 == 0 {
		return 16
	}
	if n := (b >> 1) & 7; n != 0 {
		return 17 + uint(n)
	}
	if m := (b >> 4) & 7; m != 0 {
		return 8 + uint(m)
	}
	return 17
}
