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

// Command destination serves the test destination (package test/destination): an HTTP
// endpoint that applies an effect per request and counts the effects by idempotency key. It is
// the demo destination of `make run-local`.
//
//	go run ./test/cmd/destination --listen 127.0.0.1:8089 --dedup --commit-delay 5s
//
// GET /effects?key=<key> is the post-check, GET /_summary the counts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/actionledger/actionledger/test/destination"
)

func main() {
	if err := run(); err != nil {
		log.Printf("destination: %v", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8089", "address to listen on")
	dedup := flag.Bool("dedup", false, "deduplicate on the idempotency key (replay, 409 in use, 422 reused)")
	commitDelay := flag.Duration("commit-delay", 0, "time taken before each effect is committed and answered")
	keyHeader := flag.String("key-header", destination.DefaultKeyHeader, "header that carries the idempotency key")
	shutdownTimeout := flag.Duration("shutdown-timeout", 10*time.Second,
		"how long to wait for requests in progress on exit")
	flag.Parse()

	log.SetOutput(os.Stderr)
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	d := destination.New(destination.Options{
		KeyHeader:   *keyHeader,
		Dedup:       *dedup,
		CommitDelay: *commitDelay,
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	srv := &http.Server{
		Handler:           logRequests(d, d.Options().KeyHeader),
		ReadHeaderTimeout: 10 * time.Second,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Printf("destination listening on http://%s\n", ln.Addr())

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	stop()
	log.Printf("destination: shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	s := d.Summary()
	log.Printf("destination: summary keys=%d requests=%d applied=%d duplicates=%d missing=%d",
		s.Keys, s.Requests, s.Applied, s.Duplicates, s.Missing)
	return nil
}

// logRequests logs one line per request: method, path, key and status ("closed" when the
// connection was dropped without an answer).
func logRequests(next http.Handler, keyHeader string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			status := "closed"
			if rec.status != 0 {
				status = fmt.Sprint(rec.status)
			}
			// Method and URI come from the parsed request line (no CR/LF); the key is %q-quoted.
			log.Printf("%s %s key=%q status=%s", //nolint:gosec // G706: see above
				r.Method, r.URL.RequestURI(), r.Header.Get(keyHeader), status)
		}()
		next.ServeHTTP(rec, r)
	})
}

// statusRecorder remembers the status written. Unwrap lets http.ResponseController reach the
// underlying writer (Hijack for the scripted connection reset).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
