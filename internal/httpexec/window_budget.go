package httpexec

import (
	"bufio"
	"errors"

	"github.com/klauspost/compress/zstd"

	"github.com/actionledger/actionledger/internal/membudget"
)

// Decoder windows: the bytes a tenant's answer makes the manager hold while a compressed body is decoded. A
// zstd frame declares its window (up to 8 MiB here), a brotli stream its own (up to 16 MiB), and the decoder
// allocates it at once, before a byte of the body is decoded; a destination that answers a compressed frame and
// then stalls holds it for the attempt's whole timeout. So every window is priced before its decoder opens
// (DESIGN rule 13): its declared size is taken from the process's byte budget (SetBudget; internal/membudget,
// shared with the bodies of the sends in flight), charged to the request's namespace (Request.Flow), which may
// hold at most half of it (membudget.FlowCap). A window that does not fit is not opened: the body is recorded as
// undecoded (UndecodedBody, ClassContentEncoding), as a coding the executor does not know is; the status code and
// headers are kept. Every request asks for the identity coding, so only a destination that compresses against
// the request pays for this.

// flateWindow is what a gzip or deflate decoder is charged, in bytes: its 32 KiB window and its tables.
const flateWindow = 64 << 10

// errWindowBudget: the window a compressed body declares does not fit in its flow's share of the budget now.
var errWindowBudget = errors.New("the decoder window the response declares does not fit in the manager's byte budget")

var budget = membudget.New(membudget.TotalFromMemoryLimit())

// SetBudget sets the byte budget that decoder windows are taken from (the manager's, shared with the dispatcher:
// cmd/main.go). Call it before any request.
func SetBudget(b *membudget.Budget) { budget = b }

// Budget returns the byte budget of the process: the one the dispatcher takes each send's bytes from.
func Budget() *membudget.Budget { return budget }

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
