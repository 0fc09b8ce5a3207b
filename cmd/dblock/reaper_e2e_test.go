//go:build unix

package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/reaper"
)

// seedExpiredLeases inserts n leases named prefix:1..n that expired an hour
// ago, in one statement.
func seedExpiredLeases(t *testing.T, db *dialect.DB, prefix string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	switch store.Of(db).Dialect.Kind() {
	case store.Postgres:
		_, err = db.SQL().ExecContext(ctx, `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at)
SELECT $1 || ':' || g, 'gone', 1, nextval('dblock_token_seq'), 'optimistic', now() - interval '2 hours', now() - interval '1 hour', now() - interval '2 hours'
FROM generate_series(1, $2::int) AS g`, prefix, n)
	case store.MySQL:
		c, cerr := db.SQL().Conn(ctx)
		if cerr != nil {
			t.Fatal(cerr)
		}
		defer c.Close()
		// Both bound recursion, each with its own variable (the other one fails).
		_, _ = c.ExecContext(ctx, fmt.Sprintf("SET SESSION cte_max_recursion_depth = %d", n+1))
		_, _ = c.ExecContext(ctx, fmt.Sprintf("SET SESSION max_recursive_iterations = %d", n+1))
		_, err = c.ExecContext(ctx, `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at)
WITH RECURSIVE s (g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?)
SELECT CONCAT(?, ':', g), 'gone', 1, g, 'optimistic', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR
FROM s`, n, prefix)
	default:
		now := store.Of(db).Dialect.Now()
		_, err = db.SQL().ExecContext(ctx, `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at)
WITH RECURSIVE s (g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?1)
SELECT ?2 || ':' || g, 'gone', 1, g, 'optimistic', `+now+` - 7200000000, `+now+` - 3600000000, `+now+` - 7200000000
FROM s`, n, prefix)
	}
	if err != nil {
		t.Fatalf("seed %d expired leases: %v", n, err)
	}
}

// countHeld counts the rows that still name an owner.
func countHeld(t *testing.T, db *dialect.DB) int {
	t.Helper()
	var n int
	if err := store.Of(db).GetContext(context.Background(), &n, "SELECT count(*) FROM dblock_locks WHERE owner IS NOT NULL"); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// TestReaperOnceSIGTERM sends SIGTERM to `dblock reaper --once` while its
// pass works off a backlog of expired leases: the pass stops after its
// current batch, releases the reaper lock, and dblock exits 0 saying it
// stopped early, with part of the backlog left for the next pass.
func TestReaperOnceSIGTERM(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		// 100 ms pauses between full batches of 1000: seconds of work.
		const rows = 40000
		seedExpiredLeases(t, iso.DB, "backlog", rows)
		p := cli{dsn: iso.DSN}.start(t, "reaper", "--once")
		eventually(t, "the pass to free a first batch", func() bool { return countHeld(t, iso.DB) < rows })
		p.signal(syscall.SIGTERM)
		r := p.wait()
		if r.code != 0 {
			t.Fatalf("reaper --once after SIGTERM: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stdout, "stopped early by a signal") {
			t.Fatalf("reaper --once output %q, want it to say it stopped early", r.stdout)
		}
		left := countHeld(t, iso.DB)
		if left == 0 || left >= rows {
			t.Fatalf("%d of %d expired leases left after the stopped pass, want some freed and some left", left, rows)
		}
		locks, err := iso.Store().ListLocks(context.Background(), []string{reaper.LeaseName})
		if err != nil || len(locks) != 0 {
			t.Fatalf("reaper lock after the stop: %+v %v, want released", locks, err)
		}
		t.Logf("%s: %s(%d of %d left)", iso.Kind, r.stdout, left, rows)
	})
}
