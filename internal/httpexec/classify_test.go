package httpexec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/actionledger/actionledger/internal/egress"
)

// timeoutErr mimics net/http's unexported timeout errors.
type timeoutErr struct{}

func (timeoutErr) Error() string { return "net/http: timeout awaiting response headers" }
func (timeoutErr) Timeout() bool { return true }

func TestClassify(t *testing.T) {
	const tcp, dial = "tcp", "dial"
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	readErr := func(err error) error { return &net.OpError{Op: "read", Net: tcp, Err: err} }
	tests := []struct {
		name      string
		parent    context.Context
		err       error
		connected bool
		want      ErrorClass
	}{
		{"dns", bg, &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, false, ClassDNS},
		{"dial refused", bg, &net.OpError{Op: dial, Net: tcp, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false, ClassDial},
		{"egress denied", bg, &net.OpError{Op: dial, Net: tcp, Err: &egress.DeniedError{}}, false, ClassEgressDenied},
		{"dial timeout", bg, &net.OpError{Op: dial, Net: tcp, Err: os.ErrDeadlineExceeded}, false, ClassDial},
		{"unknown authority", bg, &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false, ClassTLSHandshake},
		{"record header", bg, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, false, ClassTLSHandshake},
		{"remote alert", bg, &net.OpError{Op: "remote error", Err: errors.New("tls: handshake failure")}, false, ClassTLSHandshake},
		{"handshake timeout", bg, errors.New("net/http: TLS handshake timeout"), false, ClassTLSHandshake},
		{"alert error", bg, tls.AlertError(40), false, ClassTLSHandshake},
		{"deadline before conn", bg, context.DeadlineExceeded, false, ClassTimeout},
		{"canceled before conn", canceled, context.Canceled, false, ClassCanceled},
		{"canceled dial", canceled, &net.OpError{Op: dial, Err: errors.New("operation was canceled")}, false, ClassCanceled},
		{"other before conn", bg, errors.New(`unsupported protocol scheme "ftp"`), false, ClassOther},
		{"deadline after conn", bg, context.DeadlineExceeded, true, ClassTimeout},
		{"os deadline after conn", bg, readErr(os.ErrDeadlineExceeded), true, ClassTimeout},
		{"net/http timeout", bg, timeoutErr{}, true, ClassTimeout},
		{"canceled after conn", canceled, context.Canceled, true, ClassCanceled},
		{"ECONNRESET", bg, readErr(os.NewSyscallError("read", syscall.ECONNRESET)), true, ClassConnectionReset},
		{"EPIPE", bg, &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, true, ClassConnectionReset},
		{"EOF", bg, io.EOF, true, ClassConnectionReset},
		{"unexpected EOF", bg, io.ErrUnexpectedEOF, true, ClassConnectionReset},
		{"server closed idle", bg, errors.New("http: server closed idle connection"), true, ClassConnectionReset},
		{"broken wrapping EOF", bg, fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", io.EOF), true, ClassConnectionReset},
		{"broken wrapping malformed", bg, fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w",
			errors.New(`malformed HTTP status code "abc"`)), true, ClassProtocol},
		{"h2 stream error", bg, errors.New("stream error: stream ID 1; PROTOCOL_ERROR; received from peer"), true, ClassProtocol},
		{"h2 goaway", bg, errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR"), true, ClassConnectionReset},
		{"h2 conn lost", bg, errors.New("http2: client connection lost"), true, ClassConnectionReset},
		{"headers too large", bg, errors.New("net/http: server response headers exceeded 1048576 bytes; aborted"), true, ClassProtocol},
		{"tls alert after conn (TLS 1.3)", bg, &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, true, ClassTLSHandshake},
		{"other after conn", bg, errors.New("something odd"), true, ClassOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.parent, tt.err, tt.connected, &tracker{}); got != tt.want {
				t.Errorf("classify(%v, connected=%v) = %q, want %q", tt.err, tt.connected, got, tt.want)
			}
		})
	}
}

func TestClassifyUsesTraceForTLSPhase(t *testing.T) {
	tr := &tracker{}
	tr.tlsFailed.Store(true)
	// net/http turns a RecordHeaderError into this plain error.
	err := errors.New("http: server gave HTTP response to HTTPS client")
	if got := classify(context.Background(), err, false, tr); got != ClassTLSHandshake {
		t.Errorf("got %q, want TLSHandshake", got)
	}
}

func TestMalformedResponseIsProtocol(t *testing.T) {
	var s seen
	srv := newServer(t, recordingHandler(&s, func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 abc nonsense\r\n\r\n")
		_ = buf.Flush()
		_ = conn.Close()
	}))
	e := newExecutor(t)
	res := e.Execute(context.Background(), Request{Method: http.MethodPost, URL: srv.URL, Body: []byte("{}"), Timeout: testTimeout}, 0)
	if res.ErrorClass != ClassProtocol || !res.Written {
		t.Errorf("ErrorClass=%q Written=%v, want Protocol, true (err: %v)", res.ErrorClass, res.Written, res.Err)
	}
	if n := s.count(); n != 1 {
		t.Errorf("server received %d requests, want 1", n)
	}
}
