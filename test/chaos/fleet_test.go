package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/actionledger/actionledger/test/envtestutil"
)

// fleet runs the real manager binary as separate OS processes and stops them with SIGKILL or SIGTERM.
type fleet struct {
	t          *testing.T
	dir        string
	bin        string
	kubeconfig string

	mu    sync.Mutex
	all   []*proc
	live  []*proc
	kills int
	terms int
}

// proc is one manager process.
type proc struct {
	id   int
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	// selector is the shard's --watch-label-selector; empty for a manager that watches everything.
	selector string
}

// newFleet builds the manager once and writes a kubeconfig for the control plane. The caller registers
// stopAll with t.Cleanup once the destinations exist, so the managers die first.
func newFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{t: t, dir: t.TempDir()}
	f.bin = filepath.Join(f.dir, "actionledger")
	if err := envtestutil.Build(t.Context(), f.dir, map[string]string{"actionledger": "./cmd"}); err != nil {
		t.Fatalf("building the manager: %v", err)
	}
	f.kubeconfig = env.Kubeconfig(t)
	return f
}

// start starts one more manager process that watches every action.
func (f *fleet) start() { f.startShard("") }

// startShard starts one more manager process; a non-empty selector makes it a shard (--watch-label-selector).
func (f *fleet) startShard(selector string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := &proc{id: len(f.all) + 1, done: make(chan struct{}), selector: selector}
	p.log = filepath.Join(f.dir, fmt.Sprintf("manager-%03d.log", p.id))
	out, err := os.Create(p.log)
	if err != nil {
		f.t.Fatalf("log file: %v", err)
	}
	args := []string{
		"--kubeconfig=" + f.kubeconfig, "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--claim-margin=1s", "--max-concurrent-reconciles=8", "--shutdown-grace=" + shutdownGrace.String(),
		"--destination-allow-cidrs=127.0.0.1/32", // the destination listens on loopback, denied by default
	}
	if selector != "" {
		args = append(args, "--watch-label-selector="+selector)
	}
	if os.Getenv("CHAOS_VERBOSE") != "" {
		args = append(args, "--zap-log-level=debug")
	}
	p.cmd = exec.CommandContext(context.Background(), f.bin, args...) // killed by the chaos loop and stopAll
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.Env = append(os.Environ(), "POD_NAMESPACE=default")
	if err := p.cmd.Start(); err != nil {
		_ = out.Close()
		f.t.Fatalf("starting the manager: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	f.all = append(f.all, p)
	f.live = append(f.live, p)
}

// kill SIGKILLs p and waits for it to be gone.
func (f *fleet) kill(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killLocked(p)
	f.kills++
}

// shutdownGrace is the managers' --shutdown-grace: longer than an attempt (timeout 2s), short enough for a
// SIGTERM to fit in a chaos period.
const shutdownGrace = 3 * time.Second

// term stops p with SIGTERM (a graceful stop: sends in flight are awaited for the grace and recorded, queued
// ones are recorded as not sent) and waits for it to exit; one that does not exit in time is SIGKILLed and
// reported.
func (f *fleet) term(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(shutdownGrace + 20*time.Second):
		f.t.Errorf("manager %d did not exit within %s of SIGTERM", p.id, shutdownGrace+20*time.Second)
	}
	f.killLocked(p)
	f.terms++
}

func (f *fleet) killLocked(p *proc) {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		f.t.Errorf("manager %d did not exit after SIGKILL", p.id)
	}
	for i, q := range f.live {
		if q == p {
			f.live = append(f.live[:i], f.live[i+1:]...)
			break
		}
	}
}

// running returns the processes that watch every action, started and not killed. A process that exited by
// itself is reported (it should not: only SIGKILL ends a manager here).
func (f *fleet) running() []*proc {
	return f.runningWhere(func(p *proc) bool { return p.selector == "" })
}

// shards returns the shard processes started and not killed.
func (f *fleet) shards() []*proc {
	return f.runningWhere(func(p *proc) bool { return p.selector != "" })
}

func (f *fleet) runningWhere(keep func(*proc) bool) []*proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var live, out []*proc
	for _, p := range f.live {
		select {
		case <-p.done:
			f.t.Errorf("manager %d exited by itself (%v); log tail:\n%s", p.id, p.cmd.ProcessState, tail(p.log, 30))
		default:
			live = append(live, p)
			if keep(p) {
				out = append(out, p)
			}
		}
	}
	f.live = live
	return out
}

func (f *fleet) killCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kills
}

func (f *fleet) termCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.terms
}

// shardPhaseChanges counts the "phase changed" log lines of every shard process so far: the phase changes that
// shards, rather than the managers watching everything, wrote.
func (f *fleet) shardPhaseChanges() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.all {
		if p.selector == "" {
			continue
		}
		b, err := os.ReadFile(p.log)
		if err != nil {
			continue
		}
		n += bytes.Count(b, []byte(`"phase changed"`))
	}
	return n
}

// stopAll kills every process left and, when the test failed, prints the tail of the last logs. It is
// idempotent.
func (f *fleet) stopAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.live) > 0 {
		f.killLocked(f.live[0])
	}
	if !f.t.Failed() {
		return
	}
	from := max(0, len(f.all)-3)
	for _, p := range f.all[from:] {
		f.t.Logf("--- tail of manager %d log (%s) ---\n%s", p.id, p.log, tail(p.log, 40))
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var sb strings.Builder
	for _, l := range lines {
		sb.Write(l)
		sb.WriteByte('\n')
	}
	return sb.String()
}
