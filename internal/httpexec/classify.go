package httpexec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/actionledger/actionledger/internal/egress"
)

// maxErrorText caps the length of an Error's text, in bytes.
const maxErrorText = 300

// Error is the error in Result.Err and Response.BodyErr. Its text is the
// underlying transport error, short, without the request URL (so without
// userinfo or query), header values or body. Unwrap gives the underlying
// error (the *url.Error layer that carries the URL is removed).
type Error struct {
	// Class is the error's class, equal to Result.ErrorClass.
	Class ErrorClass
	msg   string
	cause error
}

// Error returns the short, secret-free description.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the underlying error, for errors.Is / errors.As.
func (e *Error) Unwrap() error { return e.cause }

// Stages of an attempt, as observed through httptrace, used in error text.
const (
	stageHeader   = "while sending the request header"
	stageBody     = "while sending the request body"
	stageSent     = "after the request was sent"
	stageResponse = "while reading the response body"
)

// stage describes how far a connected attempt got: GotConn happened, then
// WroteHeaders (header handed to the connection's buffer), then WroteRequest
// (whole request flushed without error).
func (t *tracker) stage() string {
	switch {
	case t.wroteRequest.Load():
		return stageSent
	case t.wroteHeaders.Load():
		return stageBody
	}
	return stageHeader
}

// newError classifies err. parent is the caller's context, actx the attempt
// context (parent plus timeout), connected whether a connection was obtained,
// stage how far the attempt got ("" when not connected).
func newError(parent, actx context.Context, timeout time.Duration, err error, connected bool, stage string,
	tr *tracker) *Error {
	cause := err
	if uerr, ok := errors.AsType[*url.Error](cause); ok {
		cause = uerr.Err // drop Op and URL: the URL may carry userinfo or secrets in the query
	}
	class := classify(parent, cause, connected, tr)
	msg := cause.Error()
	attemptTimedOut := parent.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded)
	switch {
	case class == ClassTimeout && attemptTimedOut:
		msg = "attempt timeout " + timeout.String() + " exceeded"
		if stage != "" {
			msg += " " + stage
		}
		msg += ": " + cause.Error()
	case stage != "" && (errors.Is(cause, io.EOF) || errors.Is(cause, io.ErrUnexpectedEOF)):
		msg = "server closed the connection " + stage + ": " + cause.Error()
	case stage != "":
		msg += " (" + stage + ")"
	}
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText] + "..."
	}
	return &Error{Class: class, msg: msg, cause: cause}
}

// classify maps a transport error to an ErrorClass. Before a connection was
// obtained the failing phase wins (EgressDenied, DNS, TLSHandshake, Dial), so
// a connect timeout is Dial: it proves as much as a refused connection.
func classify(parent context.Context, err error, connected bool, tr *tracker) ErrorClass {
	if errors.Is(err, context.Canceled) || errors.Is(parent.Err(), context.Canceled) {
		return ClassCanceled
	}
	if !connected {
		opErr, isOpErr := errors.AsType[*net.OpError](err)
		switch {
		case egress.IsDenied(err):
			return ClassEgressDenied
		case hasType[*net.DNSError](err):
			return ClassDNS
		case isTLSError(err) || tr.tlsFailed.Load():
			return ClassTLSHandshake
		case isOpErr && opErr.Op == "dial":
			return ClassDial
		case isTimeout(err):
			return ClassTimeout
		}
		return ClassOther
	}
	switch {
	case isTimeout(err):
		return ClassTimeout
	case isTLSError(err):
		// TLS 1.3: a server rejecting the client certificate sends its alert
		// after the client considered the handshake done and sent the request.
		return ClassTLSHandshake
	case isResetErr(err):
		return ClassConnectionReset
	case isProtocol(err):
		return ClassProtocol
	case isResetText(err):
		return ClassConnectionReset
	}
	return ClassOther
}

// hasType reports whether err's chain contains an E.
func hasType[E error](err error) bool {
	_, ok := errors.AsType[E](err)
	return ok
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	te, ok := errors.AsType[interface {
		error
		Timeout() bool
	}](err)
	return ok && te.Timeout()
}

func isTLSError(err error) bool {
	if hasType[tls.RecordHeaderError](err) || hasType[*tls.CertificateVerificationError](err) ||
		hasType[tls.AlertError](err) || hasType[*tls.ECHRejectionError](err) ||
		hasType[x509.UnknownAuthorityError](err) || hasType[x509.HostnameError](err) ||
		hasType[x509.CertificateInvalidError](err) {
		return true
	}
	// crypto/tls reports a received alert as
	// &net.OpError{Op: "remote error", Err: alert}.
	if opErr, ok := errors.AsType[*net.OpError](err); ok && opErr.Op == "remote error" {
		return true
	}
	// net/http's unexported tlsHandshakeTimeoutError.
	return strings.Contains(err.Error(), "TLS handshake timeout")
}

// isResetErr reports errors that unwrap to a connection reset or close.
func isResetErr(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// isResetText matches net/http's unexported connection-loss errors.
func isResetText(err error) bool {
	msg := err.Error()
	for _, s := range []string{
		"server closed idle connection", // errServerClosedIdle
		"transport connection broken",   // HTTP/1 broken connection wrapper
		"connection reset",
		"broken pipe",
		"client connection lost",           // HTTP/2
		"GOAWAY and closed the connection", // HTTP/2 GoAwayError
		"client conn is closed",            // HTTP/2
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// isProtocol matches net/http's (unexported) protocol violation errors.
func isProtocol(err error) bool {
	msg := err.Error()
	for _, s := range []string{
		"malformed HTTP",            // HTTP/1 status line / version / header
		"malformed MIME header",     // HTTP/1 header
		"response headers exceeded", // MaxResponseHeaderBytes
		"bad Content-Length",        // HTTP/1 framing
		"unsupported transfer encoding",
		"invalid Trailer",
		"1xx",              // too many / unexpected 1xx responses
		"stream error",     // HTTP/2 RST_STREAM
		"connection error", // HTTP/2 connection-level protocol error
		"PROTOCOL_ERROR",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// sanitizeRequestError rewrites an http.NewRequest error so that it does not
// echo the URL (url.Parse errors quote the whole URL, userinfo included).
func sanitizeRequestError(err error) error {
	uerr, ok := errors.AsType[*url.Error](err)
	if !ok {
		return err // e.g. "net/http: invalid method"
	}
	if hasType[url.EscapeError](uerr.Err) {
		// The escape may sit inside userinfo; do not echo it.
		return errors.New("httpexec: invalid request URL: invalid escape")
	}
	return errors.New("httpexec: invalid request URL: " + uerr.Err.Error())
}
