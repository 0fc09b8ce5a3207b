//go:build unix

package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// holdFor takes name in pessimistic mode on iso for ttl, as exec does.
func holdFor(t *testing.T, iso *dbtest.Isolated, name string, ttl time.Duration) *pessimistic.Lease {
	t.Helper()
	l, err := pessimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	lease, err := l.Acquire(context.Background(), name, dblock.WithTTL(ttl), dblock.WithToken())
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// TestKeepAliveStopSparesStatement stops the keep-alive while its statement
// runs on the server (CMD ended just as a keep-alive was due): stop waits for
// the statement instead of interrupting it, which would close the holding
// connection, so the release that follows commits.
func TestKeepAliveStopSparesStatement(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx := context.Background()
			lease := holdFor(t, iso, "ka", time.Minute)
			marker := fmt.Sprintf("ka-%d", time.Now().UnixNano())
			stmt := "SELECT pg_sleep(2), '" + marker + "'"
			running := `SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE '%` + marker + `%'`
			if kind == store.MySQL {
				stmt = "SELECT SLEEP(2), '" + marker + "'"
				running = `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Query' AND ID <> CONNECTION_ID() AND INFO LIKE '%` + marker + `%'`
			}
			errs := make(chan error, 1)
			stop := keepAlive{tx: lease.Tx(), stmt: stmt, every: time.Millisecond, lost: lease.Done(),
				after: func(err error) {
					select {
					case errs <- err:
					default:
					}
				}}.start()
			eventually(t, "the keep-alive statement to run on the server", func() bool {
				var n int
				return iso.Store().QueryRowxContext(ctx, running).Scan(&n) == nil && n == 1
			})
			stop()
			if err := <-errs; err != nil {
				t.Errorf("keep-alive statement under way when stopped: %v, want it to run to its end", err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Errorf("release after the keep-alive stopped: %v", err)
			}
		})
	}
}

// TestKeepAliveLate holds a name in pessimistic mode for three times its
// TTL while every keep-alive statement runs half an interval late: the
// server's idle bound (the TTL rounded up) never ends the live hold.
func TestKeepAliveLate(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			const ttl = 1500 * time.Millisecond
			lease := holdFor(t, iso, "late", ttl)
			every := keepAliveEvery(iso.Store().HoldBound(ttl))
			var ran, failed atomic.Int64
			stop := keepAlive{tx: lease.Tx(), stmt: "SELECT 1", every: every, lost: lease.Done(),
				before: func() { time.Sleep(every / 2) },
				after: func(err error) {
					if err != nil {
						failed.Add(1)
					}
					ran.Add(1)
				}}.start()
			// Statements, not the clock, measure the hold: each comes at
			// least one interval after the last.
			n := int64(3*ttl/every) + 1
			eventually(t, fmt.Sprintf("%d keep-alive statements", n), func() bool {
				select {
				case <-lease.Done():
					t.Fatalf("hold lost after %d keep-alive statements: %v", ran.Load(), lease.Err())
				default:
				}
				return ran.Load() >= n
			})
			stop()
			if f := failed.Load(); f != 0 {
				t.Errorf("%d of %d keep-alive statements failed", f, ran.Load())
			}
			if err := lease.Release(context.Background()); err != nil {
				t.Errorf("release after %d late keep-alives: %v", ran.Load(), err)
			}
		})
	}
}

// TestKeepAliveEvery checks the margin of the keep-alive against the
// server's idle bound for a range of TTLs on each dialect: the bound is the
// TTL rounded up (whole seconds, at least 2 s on MySQL and MariaDB), and a
// keep-alive may run three quarters of it late before the hold ends.
func TestKeepAliveEvery(t *testing.T) {
	t.Parallel()
	for _, d := range []store.Dialect{store.PostgresDialect(), store.MySQLDialect(true), store.MySQLDialect(false)} {
		db := &store.DB{Dialect: d}
		for _, ttl := range []time.Duration{dblock.TTLMin, 100*time.Millisecond + time.Microsecond, time.Second, 1500 * time.Millisecond,
			2*time.Second + time.Nanosecond, dblock.TTLDefault, time.Hour} {
			bound := db.HoldBound(ttl)
			every := keepAliveEvery(bound)
			late := bound - every
			switch {
			case bound < ttl:
				t.Errorf("%s ttl %v: server bound %v below the TTL", d.Kind(), ttl, bound)
			case d.Kind() == store.MySQL && (bound < 2*time.Second || bound%time.Second != 0):
				t.Errorf("%s ttl %v: server bound %v, want whole seconds, at least 2 s", d.Kind(), ttl, bound)
			case 4*late < 3*bound:
				t.Errorf("%s ttl %v: keep-alive every %v may be only %v late within the bound %v", d.Kind(), ttl, every, late, bound)
			case d.Kind() == store.MySQL && late < 1500*time.Millisecond:
				t.Errorf("%s ttl %v: keep-alive may be only %v late", d.Kind(), ttl, late)
			}
		}
	}
	if b := (&store.DB{Dialect: store.SQLiteDialect()}).HoldBound(time.Second); b != 0 {
		t.Errorf("SQLite bound %v, want none", b)
	}
}
