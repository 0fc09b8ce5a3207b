package reaper

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// benchRows is how many expired leases BenchmarkPass seeds; DBLOCK_BENCH_ROWS
// overrides it for quicker experiments.
var benchRows = envInt("DBLOCK_BENCH_ROWS", 1_000_000)

// benchIdleRows is how many idle rows (free for two days) BenchmarkPass seeds
// beside them; DBLOCK_BENCH_IDLE_ROWS overrides it. Their deletion raises the
// fencing floor on MySQL once a batch, which foreground acquisitions meet.
var benchIdleRows = envInt("DBLOCK_BENCH_IDLE_ROWS", 200_000)

// benchPause is the reaper's BatchPause in BenchmarkPass (DBLOCK_BENCH_PAUSE,
// a Go duration; the default pause when unset).
var benchPause, _ = time.ParseDuration(os.Getenv("DBLOCK_BENCH_PAUSE"))

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

// benchWorkers is how many goroutines acquire and release in the foreground.
const benchWorkers = 4

// BenchmarkPass seeds 1,000,000 expired leases and 200,000 idle rows, then
// measures one pass and the foreground acquire+release rate (4 goroutines,
// each on its own name) while it runs, beside the rate with no pass running
// (the mean of 5 s before and 5 s after the pass). It runs only with
// -bench (go test -run '^$' -bench Pass -benchtime 1x ./reaper/) and reports:
//
//	pass-s          the pass's wall time
//	freed           expired leases the pass freed
//	idle-deleted    idle rows the pass deleted
//	idle-ops/s      foreground acquire+release pairs per second without a pass
//	during-ops/s    the same while the pass runs
//	during/idle     their ratio (the design asks for at least 0.8)
//	fg-errors       foreground acquisitions refused or failed during the pass (want 0)
func BenchmarkPass(b *testing.B) {
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		b.Run(string(kind), func(b *testing.B) {
			iso := dbtest.New(b, kind)
			for b.Loop() {
				benchPass(b, iso)
			}
		})
	}
}

func benchPass(b *testing.B, iso *dbtest.Isolated) {
	ctx := context.Background()
	seedStart := time.Now()
	seedExpired(b, iso.DB, benchRows)
	seedIdle(b, iso.DB, fmt.Sprintf("idle-%d", b.N), benchIdleRows, int64(benchRows))
	b.Logf("%s: seeded %d expired leases and %d idle rows in %v", iso.Kind, benchRows, benchIdleRows, time.Since(seedStart).Round(time.Millisecond))

	fg := iso.Open(b)
	before, _ := foreground(b, fg, 5*time.Second, nil)

	r := newReaper(b, iso.Open(b), &Config{BatchPause: benchPause})
	var (
		st      Stats
		passErr error
		passDur time.Duration
	)
	duringRate, errs := foreground(b, fg, 0, func() {
		start := time.Now()
		st, passErr = r.RunOnce(ctx)
		passDur = time.Since(start)
	})
	if passErr != nil {
		b.Fatalf("pass: %v", passErr)
	}
	// A foreground acquisition cancelled as it committed leaves a lease that
	// may expire before the pass: hence at least, not exactly.
	if st.ExpiredFreed < benchRows {
		b.Fatalf("pass freed %d, want at least %d", st.ExpiredFreed, benchRows)
	}
	if st.IdleDeleted < benchIdleRows {
		b.Fatalf("pass deleted %d idle rows, want at least %d", st.IdleDeleted, benchIdleRows)
	}
	// The database is still writing back the seed, and other work may share
	// the server: the rate without a pass is the mean of one measured before
	// and one after it.
	after, _ := foreground(b, fg, 5*time.Second, nil)
	idleRate := (before + after) / 2
	b.ReportMetric(passDur.Seconds(), "pass-s")
	b.ReportMetric(float64(st.ExpiredFreed), "freed")
	b.ReportMetric(float64(st.IdleDeleted), "idle-deleted")
	b.ReportMetric(float64(errs), "fg-errors")
	b.ReportMetric(idleRate, "idle-ops/s")
	b.ReportMetric(duringRate, "during-ops/s")
	b.ReportMetric(duringRate/idleRate, "during/idle")
	b.Logf("%s: batch pause %v: pass %v freed %d and deleted %d idle in %d batches; foreground %.0f ops/s idle (%.0f before, %.0f after), %.0f ops/s during the pass (%.2fx), %d foreground errors",
		iso.Kind, r.Config().BatchPause, passDur.Round(time.Millisecond), st.ExpiredFreed, st.IdleDeleted, st.Batches, idleRate, before, after, duringRate, duringRate/idleRate, errs)
}

// foreground runs benchWorkers goroutines acquiring and releasing their own
// names on db, for d, or while during runs when it is not nil, and returns
// the rate of completed acquire+release pairs and the count of failures.
func foreground(b *testing.B, db *dialect.DB, d time.Duration, during func()) (float64, int64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		ops, errs atomic.Int64
		wg        sync.WaitGroup
	)
	for w := 0; w < benchWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, owner := randomName("fg"), randomName("owner")
			for ctx.Err() == nil {
				res, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: time.Minute})
				if err != nil || !res.Acquired {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				ok, err := store.Of(db).ReleaseLease(context.WithoutCancel(ctx), nil, name, owner, res.Token)
				if err != nil || !ok {
					errs.Add(1)
					continue
				}
				ops.Add(1)
			}
		}()
	}
	start := time.Now()
	if during != nil {
		during()
	} else {
		time.Sleep(d)
	}
	n := ops.Load()
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	return float64(n) / elapsed.Seconds(), errs.Load()
}

// seedExpired inserts n expired leases in one statement.
func seedExpired(b *testing.B, db *dialect.DB, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var query string
	switch store.Of(db).Dialect.Kind() {
	case store.Postgres:
		query = fmt.Sprintf(`INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at)
SELECT 'bench:' || g, 'ghost', 1, nextval('dblock_token_seq'), 'optimistic',
       now() - interval '2 hours', now() - interval '1 hour' + g * interval '1 microsecond', now() - interval '2 hours'
FROM generate_series(1, %d) AS g`, n)
	case store.MySQL:
		conn, err := db.SQL().Conn(ctx)
		if err != nil {
			b.Fatalf("seed: %v", err)
		}
		defer conn.Close()
		// Both bound recursion, each with its own variable (the other one fails).
		_, _ = conn.ExecContext(ctx, fmt.Sprintf("SET SESSION cte_max_recursion_depth = %d", n+1))
		_, _ = conn.ExecContext(ctx, fmt.Sprintf("SET SESSION max_recursive_iterations = %d", n+1))
		query = fmt.Sprintf(`INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at)
WITH RECURSIVE s (g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < %d)
SELECT CONCAT('bench:', g), 'ghost', 1, g, 'optimistic',
       UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL g MICROSECOND, UTC_TIMESTAMP(6) - INTERVAL 2 HOUR
FROM s`, n)
		if _, err := conn.ExecContext(ctx, query); err != nil {
			b.Fatalf("seed: %v", err)
		}
		return
	default:
		b.Fatalf("seed: no benchmark for %s", store.Of(db).Dialect.Kind())
	}
	if _, err := db.SQL().ExecContext(ctx, query); err != nil {
		b.Fatalf("seed: %v", err)
	}
}
