// Command registry serves an OCI distribution registry (go-containerregistry's pkg/registry, blobs in memory) over
// plain HTTP on a loopback address, for `make release` to push to and a single-node test cluster to pull from
// (test/cluster). It writes the address it listens on to --addr-file and serves until SIGTERM or SIGINT.
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

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "the address to listen on (loopback only)")
	addrFile := flag.String("addr-file", "", "write the address listened on to this file")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("registry: --addr %q: want a loopback address", *addr)
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("registry: %v", err)
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(l.Addr().String()), 0o600); err != nil {
			log.Fatalf("registry: %v", err)
		}
	}
	fmt.Println(l.Addr().String())
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(os.Stderr, "registry: ", log.LstdFlags))),
		ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("registry: %v", err)
	}
}
