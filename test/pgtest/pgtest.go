// Package pgtest starts a throwaway PostgreSQL cluster for tests: initdb on a fresh directory, one postmaster
// listening on 127.0.0.1 at a free port (unix sockets in the same directory), with fsync, synchronous_commit and
// full_page_writes off for speed. Nothing is skipped: when the server binaries are missing, Start fails with a
// message that says what to install.
//
// The binaries are found in $PGTEST_BINDIR, else `pg_config --bindir`, else the newest
// /usr/lib/postgresql/*/bin (the Debian `postgresql` package). initdb refuses to run as root, so when the
// effective uid is 0 the cluster directory is chowned to the `postgres` user and initdb and postgres run under
// its uid and gid.
//
// The postmaster is a child of the test process with a parent-death signal, so a test binary that dies does
// not leave it behind. Shutdown and Restart stop and start it on the same port and data directory, for tests of
// a store that is briefly unreachable.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Superuser is the cluster's superuser role (initdb -U); connections from loopback are trusted.
const Superuser = "postgres"

// Server is one running (or shut down) throwaway cluster.
type Server struct {
	bin     string // directory of initdb, postgres, psql, pg_isready
	root    string // the cluster directory Start created (removed by Stop)
	data    string
	sock    string
	logPath string
	port    int
	cred    *syscall.Credential // nil unless running as root

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

// BinDir returns the directory of the PostgreSQL server binaries (initdb, postgres, psql, pg_isready), or an
// error that says how to install them.
func BinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres", "psql", "pg_isready"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil { //nolint:gosec // a test helper's own lookup
				return false
			}
		}
		return true
	}
	if dir := os.Getenv("PGTEST_BINDIR"); dir != "" {
		if has(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("pgtest: PGTEST_BINDIR=%s lacks initdb, postgres, psql or pg_isready", dir)
	}
	if out, err := exec.CommandContext(context.Background(), "pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return pgMajor(b) - pgMajor(a) })
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	return "", errors.New("pgtest: PostgreSQL server binaries not found (looked in $PGTEST_BINDIR, `pg_config --bindir` " +
		"and /usr/lib/postgresql/*/bin); install the Debian `postgresql` package (apt-get install postgresql) " +
		"or set PGTEST_BINDIR")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start creates a fresh cluster in a new directory under dir (os.TempDir() when dir is ""), starts it and waits
// until it accepts connections. When running as root, dir must be traversable by the postgres user (the
// default, /tmp, is). Stop shuts the server down and removes the directory; ctx bounds initdb and the wait.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(dir, "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: cluster directory: %w", err)
	}
	s := &Server{bin: bin, root: root, data: filepath.Join(root, "data"), sock: root,
		logPath: filepath.Join(root, "postgres.log")}
	fail := func(err error) (*Server, error) {
		_ = os.RemoveAll(root)
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("pgtest: running as root, initdb needs the unprivileged user postgres: %w", err))
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
		if err := os.Chown(root, int(uid), int(gid)); err != nil {
			return fail(fmt.Errorf("pgtest: chown cluster directory: %w", err))
		}
	}
	if out, err := s.command(ctx, "initdb", "-D", s.data, "-U", Superuser, "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgtest: initdb: %w: %s", err, bytes.TrimSpace(out)))
	}
	// A free port can be taken between the probe and the bind; try a few.
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return fail(err)
		}
		if err = s.writeConf(); err != nil {
			return fail(err)
		}
		if err = s.Restart(ctx); err == nil {
			return s, nil
		}
		if attempt == 2 || ctx.Err() != nil {
			return fail(err)
		}
	}
}

// StartT starts a cluster for t (failing t when it cannot) and stops it in t.Cleanup.
func StartT(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}

// DSN returns a libpq URL for the superuser on the postgres database over TCP on 127.0.0.1, e.g.
// postgres://postgres@127.0.0.1:54321/postgres?sslmode=disable.
func (s *Server) DSN() string { return s.DSNFor("postgres") }

// DSNFor returns the DSN of database db on this server (see CreateDatabase).
func (s *Server) DSNFor(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Port returns the TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// Dir returns the cluster directory (data/, postgres.log and the unix socket).
func (s *Server) Dir() string { return s.root }

// CreateDatabase creates database name (a plain identifier: letters, digits, underscore) and returns its DSN,
// so that tests sharing one server do not share tables.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	for _, r := range name {
		if r != '_' && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return "", fmt.Errorf("pgtest: database name %q: want [a-z0-9_]", name)
		}
	}
	if err := s.SQL(ctx, "postgres", "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.DSNFor(name), nil
}

// SQL runs statements with psql on database db over the unix socket, failing on the first error.
func (s *Server) SQL(ctx context.Context, db, statements string) error {
	cmd := s.command(ctx, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", s.sock, "-p", strconv.Itoa(s.port),
		"-U", Superuser, "-d", db, "-c", statements)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: psql: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Query runs one query with psql on database db and returns its rows unaligned, without headers, fields
// separated by "|" and rows by newlines (psql -At), trimmed; for example
// Query(ctx, "postgres", "SELECT pg_total_relation_size('actionledger_tombstones')") returns "98304".
func (s *Server) Query(ctx context.Context, db, query string) (string, error) {
	cmd := s.command(ctx, "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", s.sock,
		"-p", strconv.Itoa(s.port), "-U", Superuser, "-d", db, "-c", query)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("pgtest: psql: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Shutdown stops the postmaster (fast shutdown: open connections are closed) and keeps the data directory and
// the port, so Restart brings the same cluster back. Shutting down a stopped server does nothing.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	var err error
	select {
	case err = <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		err = <-s.done
	}
	s.cmd = nil
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return fmt.Errorf("pgtest: shutdown: %w", err)
	}
	return nil
}

// Restart starts the postmaster again (after Shutdown) on the same port and waits until it accepts
// connections. Restarting a running server does nothing. A postmaster that exits while starting is started
// again, up to restartTries times (once, in a clean-clone CI run, the first start right after a fast shutdown
// exited with status 1 and logged nothing), each exit's log tail in the error.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	var errs []error
	for range restartTries {
		err := s.startOnce(ctx)
		if err == nil || ctx.Err() != nil || !errors.Is(err, errExited) {
			return err
		}
		errs = append(errs, err)
		select { // the exited postmaster's files (postmaster.pid, the socket's lock) are gone by the next try
		case <-ctx.Done():
			return errors.Join(append(errs, ctx.Err())...)
		case <-time.After(500 * time.Millisecond):
		}
	}
	return errors.Join(errs...)
}

// restartTries bounds Restart's starts; errExited marks a start whose postmaster exited before it was ready.
const restartTries = 3

var errExited = errors.New("pgtest: postgres exited")

// startOnce starts the postmaster and waits until it accepts connections (s.mu held).
func (s *Server) startOnce(ctx context.Context) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgtest: log: %w", err)
	}
	defer func() { _ = logf.Close() }()
	cmd := s.command(context.Background(), "postgres", "-D", s.data)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT // the postmaster dies with the test binary
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		ping := s.command(ctx, "pg_isready", "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", Superuser,
			"-d", "postgres", "-t", "2")
		if ping.Run() == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("%w: %v; log tail: %s", errExited, err, s.logTail())
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			exit := <-done
			return fmt.Errorf("pgtest: postgres not ready: %w (then killed: %v); log tail: %s", ctx.Err(), exit, s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop shuts the server down and removes its directory.
func (s *Server) Stop() error {
	err := s.Shutdown()
	if rmErr := os.RemoveAll(s.root); rmErr != nil && err == nil {
		err = fmt.Errorf("pgtest: remove cluster directory: %w", rmErr)
	}
	return err
}

// command runs a PostgreSQL binary, as the postgres user when we are root.
func (s *Server) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...) //nolint:gosec // our own PostgreSQL binaries
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = s.root
	// libpq and initdb read PG* variables; the caller's must not redirect us to another server.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	return cmd
}

func (s *Server) writeConf() error {
	conf := fmt.Sprintf(`
# pgtest
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
shared_buffers = 32MB
log_min_messages = warning
`, s.port, s.sock)
	// Append-only: the last setting of a name wins, so a retry with another port overrides the previous one.
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgtest: postgresql.conf: %w", err)
	}
	if _, err := f.WriteString(conf); err != nil {
		_ = f.Close()
		return fmt.Errorf("pgtest: postgresql.conf: %w", err)
	}
	return f.Close()
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

func freePort() (int, error) {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
