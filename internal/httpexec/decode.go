package httpexec

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// Content codings. Every request asks for the identity coding (Accept-Encoding: identity), so that the body
// read is the body the destination meant; a destination that compresses all the same is decoded here, before
// anything reads the body, because a compressed body hides an echoed Secret value from redaction and its
// length is a compression oracle (BREACH): a guess that matches part of the value compresses better.
const (
	// UndecodedBody is the Body of a Response whose Content-Encoding the executor cannot decode (a coding it
	// does not know, or more than maxContentCodings of them): the bytes received are hashed, never kept. Its
	// BodyErr has ClassContentEncoding.
	UndecodedBody = "[not decoded: unsupported Content-Encoding]"
	// maxContentCodings bounds the codings listed in one Content-Encoding (each is a decoder stacked on the
	// previous one); RFC 9110 allows a list, in practice one is used.
	maxContentCodings = 2
	// maxZstdWindow is the largest zstd window accepted, in bytes (8 MiB): RFC 9659 section 3 limits the
	// window of the "zstd" content coding to 8 MB, so a larger one is a decoding error, not an allocation.
	maxZstdWindow = 8 << 20

	codingGzip    = "gzip"
	codingDeflate = "deflate"
	codingBrotli  = "br"
	codingZstd    = "zstd"
)

// errUnsupportedCoding: the Content-Encoding names a coding the executor does not decode.
var errUnsupportedCoding = errors.New("unsupported content coding")

// contentCodings are the codings of h's Content-Encoding, in the order they were applied, lower case, with
// "identity" left out and "x-gzip" read as "gzip" (RFC 9110 section 8.4.1.3); nil for an identity body. An
// unknown coding, or more than maxContentCodings, is errUnsupportedCoding.
func contentCodings(h http.Header) ([]string, error) {
	var out []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			switch c {
			case "", "identity":
				continue
			case "x-gzip":
				c = codingGzip
			case codingGzip, codingDeflate, codingBrotli, codingZstd:
			default:
				return nil, errUnsupportedCoding
			}
			out = append(out, c)
		}
	}
	if len(out) > maxContentCodings {
		return nil, errUnsupportedCoding
	}
	return out, nil
}

// decoder returns r with the codings removed (the last applied is removed first) and a function that
// releases the decoders. An empty body is returned as it is (a HEAD answer or a 204 may name a coding).
// Errors are those of the decoders' headers (a gzip body without its magic number).
//
// Each decoder's window is taken from the byte budget in flow's share before it opens (window_budget.go); one that
// does not fit is errWindowBudget, and nothing of it is allocated.
func decoder(r io.Reader, codings []string, flow string) (io.Reader, func(), error) {
	var closers []func()
	release := func() {
		for _, c := range closers {
			c()
		}
	}
	br := bufio.NewReader(r)
	if len(codings) == 0 || !hasByte(br) {
		return br, release, nil // identity, or empty (a read error is reported by reading the body)
	}
	out := io.Reader(br)
	for _, coding := range slices.Backward(codings) {
		head := bufio.NewReader(out)
		free, ok := budget.TryTake(flow, declaredWindow(head, coding))
		if !ok {
			release()
			return nil, func() {}, errWindowBudget
		}
		d, closeFn, err := newDecoder(head, coding)
		if err != nil {
			free()
			release()
			return nil, func() {}, err
		}
		closers = append(closers, closeFn, free)
		out = d
	}
	return out, release, nil
}

// hasByte reports whether br has at least one byte to read.
func hasByte(br *bufio.Reader) bool {
	_, err := br.Peek(1)
	return err == nil
}

// newDecoder returns a decoder of one coding reading r. "deflate" is the zlib format (RFC 9110 section
// 8.4.1.2); a raw deflate stream, which some servers send under that name, is accepted too.
func newDecoder(r io.Reader, coding string) (io.Reader, func(), error) {
	switch coding {
	case codingGzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { _ = zr.Close() }, nil
	case codingDeflate:
		br := bufio.NewReader(r)
		if h, err := br.Peek(2); err == nil && isZlibHeader(h) {
			zr, err := zlib.NewReader(br)
			if err != nil {
				return nil, nil, err
			}
			return zr, func() { _ = zr.Close() }, nil
		}
		fr := flate.NewReader(br)
		return fr, func() { _ = fr.Close() }, nil
	case codingBrotli:
		return brotli.NewReader(r), func() {}, nil
	case codingZstd:
		// One decoder goroutine, the window bounded: neither the number of blocks in flight nor the window a
		// frame declares can make it allocate more.
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow),
			zstd.WithDecoderMaxMemory(maxZstdWindow))
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return nil, nil, errUnsupportedCoding
}

// isZlibHeader reports whether h (two bytes) is a zlib header with the deflate method (RFC 1950 section 2.2).
func isZlibHeader(h []byte) bool {
	return h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0
}

// rawReader reads the body as received, at most limit bytes. It records whether the body went on beyond the
// limit (hit, probed with one byte that is not passed on) and the first error of the body itself (err), so
// that a decoder's error can be told from the connection's.
type rawReader struct {
	r     io.Reader
	limit int64
	hit   bool
	err   error
}

func (c *rawReader) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		if !c.hit {
			var probe [1]byte
			if n, _ := io.ReadFull(c.r, probe[:]); n > 0 {
				c.hit = true
			}
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.r.Read(p)
	c.limit -= int64(n)
	if err != nil && !errors.Is(err, io.EOF) && c.err == nil {
		c.err = err
	}
	return n, err
}

// readResponseBody reads body, the body of out as received, into out: decoded (contentCodings, decoder), at
// most hardLimit bytes as received and as decoded (a decompression bomb stops there), the first keep decoded
// bytes kept and all of them hashed. When a coding was removed, or could not be, out.Header loses
// Content-Length (the length as received: of a compressed body, a compression oracle) and, once decoded,
// Content-Encoding, as net/http's own transparent decompression does; Response.Decoded names the codings
// removed. A body that cannot be decoded is kept as UndecodedBody, hashed as received, with out.BodyErr of
// ClassContentEncoding; a body whose decoding fails part way keeps what was decoded before (BodyTruncated).
// The error returned is that of reading the body itself (a timeout or reset), for the caller to classify.
//
// flow is the namespace the request is made for: the decoders' windows are charged to its share (window_budget.go).
func readResponseBody(out *Response, body io.Reader, keep int, hardLimit int64, flow string) error {
	if hardLimit <= 0 {
		hardLimit = DefaultMaxReadBytes
	}
	raw := &rawReader{r: body, limit: hardLimit}
	codings, err := contentCodings(out.Header)
	if err != nil || len(codings) > 0 {
		out.Header.Del("Content-Length")
	}
	if err != nil {
		undecoded(out, raw, nil, hardLimit, err)
		return raw.err
	}
	rawHash, src := sha256.New(), io.Reader(raw)
	if len(codings) > 0 {
		src = io.TeeReader(raw, rawHash) // for the hash as received, should a decoder refuse the body
	}
	dec, release, err := decoder(src, codings, flow)
	defer release()
	if err != nil {
		undecoded(out, raw, rawHash, hardLimit, err)
		return raw.err
	}
	b, n, more, sum, rerr := readBody(dec, keep, hardLimit)
	if rerr != nil && n == 0 && raw.err == nil && !raw.hit {
		undecoded(out, raw, rawHash, hardLimit, rerr) // nothing decoded: a zstd or brotli body in another format
		return nil
	}
	if len(codings) > 0 {
		out.Decoded = strings.Join(codings, ", ")
		out.Header.Del("Content-Encoding")
	}
	out.Body, out.BodyLength, out.BodySHA256 = b, n, sum
	out.BodyTruncated = more || raw.hit || n > int64(keep) || rerr != nil
	switch {
	case raw.err != nil:
		return raw.err
	case rerr != nil && !raw.hit:
		out.BodyErr = contentEncodingError(rerr)
	}
	return nil
}

// undecoded records a body that cannot be decoded: UndecodedBody, the hash and length of the bytes as received
// (h already holds those a failed decoder read), and a ClassContentEncoding error with cause.
func undecoded(out *Response, raw *rawReader, h hash.Hash, hardLimit int64, cause error) {
	if h == nil {
		h = sha256.New()
	}
	_, _ = io.Copy(h, raw)
	out.Body, out.BodyTruncated, out.BodySHA256 = []byte(UndecodedBody), true, hashString(h)
	out.BodyLength = hardLimit - raw.limit
	out.BodyErr = contentEncodingError(cause)
}

// contentEncodingError is the ClassContentEncoding error of a body that does not decode. Its text is fixed:
// a decoder's message may quote offsets or values of the body.
func contentEncodingError(cause error) *Error {
	msg := "the response body does not decode as its Content-Encoding names"
	switch {
	case errors.Is(cause, errWindowBudget):
		msg = "the response body is compressed with a decoder window that does not fit in the manager's budget " +
			"for decoder windows now (the request asked for Accept-Encoding: identity), so its body is not kept"
	case errors.Is(cause, errUnsupportedCoding):
		msg = "the response's Content-Encoding is not gzip, deflate, br or zstd (at most " +
			strconv.Itoa(maxContentCodings) + " of them), so its body is not kept"
	}
	return &Error{Class: ClassContentEncoding, msg: msg, cause: cause}
}
