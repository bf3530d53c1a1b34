// Command netns-forward forwards TCP connections from a listener in its own network namespace to an address in
// another one. hack/cluster/up.sh (POD_NETWORK=1) runs it on the host's 127.0.0.1 so that kubectl, helm and the
// tests on the host reach the API server, which listens on the node's address inside the cluster's network
// namespace:
//
//	netns-forward --listen 127.0.0.1:26443 --netns /proc/<pid>/ns/net --to 10.250.0.1:6443
//
// Each connection is dialed from an OS thread that joins the namespace only for the socket() and connect() of
// that dial (setns(2) on a locked thread, then back): the socket stays in the cluster's namespace, the process
// and its listener in the host's. It needs CAP_SYS_ADMIN (root).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on, in this process's network namespace")
	nsPath := flag.String("netns", "", "the network namespace to dial in (e.g. /proc/<pid>/ns/net)")
	to := flag.String("to", "", "address to dial in that namespace")
	flag.Parse()
	if *nsPath == "" || *to == "" {
		log.Fatal("netns-forward: --netns and --to are required")
	}
	// The namespace is held open for the process's life: it outlives the process that created it.
	ns, err := os.Open(*nsPath)
	if err != nil {
		log.Fatalf("netns-forward: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *listen)
	if err != nil {
		log.Fatalf("netns-forward: %v", err)
	}
	log.Printf("netns-forward: %s -> %s in %s", ln.Addr(), *to, *nsPath)
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Printf("netns-forward: accept: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go forward(ctx, c, int(ns.Fd()), *to)
	}
}

func forward(ctx context.Context, c net.Conn, nsFD int, to string) {
	defer func() { _ = c.Close() }()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	up, err := dialIn(dctx, nsFD, to)
	cancel()
	if err != nil {
		log.Printf("netns-forward: %v", err)
		return
	}
	defer func() { _ = up.Close() }()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
}

// dialIn dials addr from the network namespace nsFD. The goroutine's OS thread joins the namespace for the dial
// and returns to its own before it is unlocked; a thread that could not return is never unlocked, so the Go
// runtime ends it with the goroutine.
func dialIn(ctx context.Context, nsFD int, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("opening this thread's network namespace: %w", err)
	}
	defer func() { _ = self.Close() }()
	if err := unix.Setns(nsFD, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns into the cluster's network namespace: %w", err)
	}
	conn, dialErr := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// Stay locked: the thread is in the wrong namespace and exits with this goroutine.
		if conn != nil {
			_ = conn.Close()
		}
		return nil, errors.Join(dialErr, fmt.Errorf("setns back: %w", err))
	}
	runtime.UnlockOSThread()
	if dialErr != nil {
		return nil, fmt.Errorf("dialing %s in the cluster's network namespace: %w", addr, dialErr)
	}
	return conn, nil
}
