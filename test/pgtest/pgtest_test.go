package pgtest_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/actionledger/actionledger/test/pgtest"
)

func TestStartShutdownRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := pgtest.StartT(t)
	if !strings.HasPrefix(s.DSN(), "postgres://postgres@127.0.0.1:"+strconv.Itoa(s.Port())+"/postgres?") {
		t.Fatalf("DSN %q", s.DSN())
	}
	dsn, err := s.CreateDatabase(ctx, "pgtest_a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dsn, "/pgtest_a?") {
		t.Fatalf("DSN %q", dsn)
	}
	if err := s.SQL(ctx, "pgtest_a", "CREATE TABLE t (k int PRIMARY KEY); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// fsync is off (the point of a throwaway cluster).
	if err := s.SQL(ctx, "pgtest_a", "DO $$ BEGIN IF current_setting('fsync') <> 'off' THEN RAISE 'fsync on'; END IF; END $$"); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))

	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr); err == nil {
		_ = c.Close()
		t.Fatalf("%s still accepts connections after Shutdown", addr)
	}
	if err := s.SQL(ctx, "pgtest_a", "SELECT 1"); err == nil {
		t.Fatal("SQL succeeded on a shut down server")
	}

	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// Same cluster: the row written before the shutdown is there (1/count fails on an empty table).
	if err := s.SQL(ctx, "pgtest_a", "SELECT 1/count(*) FROM t"); err != nil {
		t.Fatal(err)
	}
}

func TestTwoServersAreIndependent(t *testing.T) {
	a, b := pgtest.StartT(t), pgtest.StartT(t)
	if a.Port() == b.Port() || a.Dir() == b.Dir() {
		t.Fatalf("shared port or directory: %d %d %s %s", a.Port(), b.Port(), a.Dir(), b.Dir())
	}
}

func TestCreateDatabaseRejectsOddNames(t *testing.T) {
	s := &pgtest.Server{}
	if _, err := s.CreateDatabase(context.Background(), "x; DROP"); err == nil {
		t.Fatal("accepted an odd database name")
	}
}
