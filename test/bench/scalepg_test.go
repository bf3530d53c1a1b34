package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actionledger/actionledger/test/pgtest"
)

// pgTable is the PostgreSQL tombstone store's table (--tombstone-store=postgres).
const pgTable = "actionledger_tombstones"

// helpOut caches each manager binary's -help output.
var helpOut sync.Map

// hasFlag reports whether the manager binary's -help lists flag.
func hasFlag(bin, flag string) bool {
	v, ok := helpOut.Load(bin)
	if !ok {
		out, _ := exec.CommandContext(context.Background(), bin, "-help").CombinedOutput() //nolint:gosec // our own build
		v, _ = helpOut.LoadOrStore(bin, string(out))
	}
	help := v.(string)
	return strings.Contains(help, "-"+flag+" ") || strings.Contains(help, "-"+flag+"\n")
}

// storeAvailable reports whether this manager build can run store; when it cannot, it says why in a note.
// The postgres store needs --tombstone-store and --tombstone-store-dsn-file.
func storeAvailable(t *testing.T, bin, store string) bool {
	t.Helper()
	if store == "objects" {
		return true
	}
	for _, f := range []string{"tombstone-store", "tombstone-store-dsn-file"} {
		if !hasFlag(bin, f) {
			t.Logf("note: the manager has no --%s flag; the %s store is not measured", f, store)
			return false
		}
	}
	return true
}

// storeArgs returns the manager flags for store. For postgres it starts a throwaway cluster (test/pgtest,
// stopped at t's end), writes its DSN into a file in dir, and returns the reader of the table's size too.
func storeArgs(t *testing.T, bin, store, dir string) ([]string, *pgStats) {
	t.Helper()
	if store == "objects" {
		if hasFlag(bin, "tombstone-store") {
			return []string{"--tombstone-store=objects"}, nil
		}
		return nil, nil
	}
	srv := pgtest.StartT(t)
	dsnFile := filepath.Join(dir, "tombstone-store.dsn")
	if err := os.WriteFile(dsnFile, []byte(srv.DSN()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bd, err := pgtest.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--tombstone-store=postgres", "--tombstone-store-dsn-file=" + dsnFile},
		&pgStats{psql: filepath.Join(bd, "psql"), dsn: srv.DSN()}
}

// pgStats reads the PostgreSQL tombstone table's row count and sizes with psql.
type pgStats struct {
	psql, dsn string
	once      sync.Once
}

// query runs one SQL statement and returns psql's unaligned, tuples-only output (fields separated by |).
func (p *pgStats) query(sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.psql, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", p.dsn, "-c", sql).CombinedOutput() //nolint:gosec // our own query
	if err != nil {
		return "", fmt.Errorf("psql %q: %w: %s", sql, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// read returns the row count and pg_total_relation_size (heap, indexes and TOAST, dead rows not yet vacuumed
// included); 0, 0 and one logged note when the table cannot be read.
func (p *pgStats) read(t *testing.T) (rows, bytes int64) {
	t.Helper()
	out, err := p.query(fmt.Sprintf("SELECT count(*), pg_total_relation_size('%s') FROM %s", pgTable, pgTable))
	if err == nil {
		if rows, bytes, err = parsePair(out); err == nil {
			return rows, bytes
		}
	}
	p.once.Do(func() { t.Logf("note: reading %s: %v", pgTable, err) })
	return 0, 0
}

// PGSizes are the tombstone table's figures at the end of a postgres run.
type PGSizes struct {
	Rows int64 `json:"rows"`
	// Total is pg_total_relation_size: table, indexes and TOAST, with the space of deleted rows that
	// autovacuum has marked free but not returned.
	Total int64 `json:"totalRelationBytes"`
	// Table and Indexes split Total (pg_table_size includes TOAST).
	Table   int64 `json:"tableBytes"`
	Indexes int64 `json:"indexesBytes"`
	// RowData is sum(pg_column_size(row)): the live tuples' own bytes, without page, tuple-header slack or index.
	RowData int64 `json:"rowDataBytes"`
	// TotalAfterVacuumFull is pg_total_relation_size after VACUUM FULL (the table rewritten with live rows
	// only: the counterpart of etcd's defragmentation).
	TotalAfterVacuumFull int64 `json:"totalAfterVacuumFullBytes"`
}

// sizes reads PGSizes, running VACUUM FULL on the table last.
func (p *pgStats) sizes() (PGSizes, error) {
	var s PGSizes
	out, err := p.query(fmt.Sprintf("SELECT count(*), pg_total_relation_size('%[1]s'), pg_table_size('%[1]s'), pg_indexes_size('%[1]s'), "+
		"coalesce(sum(pg_column_size(t.*)), 0) FROM %[1]s t", pgTable))
	if err != nil {
		return s, err
	}
	f := strings.Split(out, "|")
	if len(f) != 5 {
		return s, fmt.Errorf("psql: unexpected answer %q", out)
	}
	v := make([]int64, 5)
	for i := range f {
		if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return s, fmt.Errorf("psql: field %d of %q: %w", i, out, err)
		}
	}
	s.Rows, s.Total, s.Table, s.Indexes, s.RowData = v[0], v[1], v[2], v[3], v[4]
	if _, err := p.query("VACUUM FULL " + pgTable); err != nil {
		return s, err
	}
	out, err = p.query(fmt.Sprintf("SELECT 0, pg_total_relation_size('%s')", pgTable))
	if err != nil {
		return s, err
	}
	_, s.TotalAfterVacuumFull, err = parsePair(out)
	return s, err
}

// parsePair parses psql's "a|b" answer of two integers.
func parsePair(out string) (a, b int64, err error) {
	x, y, ok := strings.Cut(strings.TrimSpace(out), "|")
	if !ok {
		return 0, 0, fmt.Errorf("psql: want two fields, got %q", out)
	}
	if a, err = strconv.ParseInt(x, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("psql: %q: %w", out, err)
	}
	if b, err = strconv.ParseInt(y, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("psql: %q: %w", out, err)
	}
	return a, b, nil
}
