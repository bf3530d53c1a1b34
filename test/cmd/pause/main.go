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

// Command pause is the pod sandbox ("pause") image of the test cluster (hack/cluster) and its
// do-nothing workload: it blocks until SIGTERM or SIGINT and exits 0, reaping every child that
// exits meanwhile (as PID 1 of a pod it is the reaper of the pod's orphans). It is built static
// (CGO_ENABLED=0) and has no flags; it writes one line to stderr when it starts and when it stops.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	_, _ = fmt.Fprintf(os.Stderr, "pause: pid %d waiting for SIGTERM or SIGINT\n", os.Getpid())
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		_, _ = fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", sig)
		return
	}
}

// reap collects every exited child without blocking (several exits can share one SIGCHLD).
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
