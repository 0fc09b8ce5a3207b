package main

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestKeepAliveStopKeepsTheHold: stopping the keep-alive of a pessimistic
// hold, as exec does when CMD ends, must leave the holding transaction
// usable, even when a keep-alive statement is in flight at that moment.
// Cancelling that statement made the driver close the connection (both
// drivers do, on a context cancelled mid-statement), so the release's commit
// failed with "driver: bad connection" and exec exited 76 after CMD had run
// to the end under its lock: seen on a loaded machine, where statements are
// slower and so more often in flight. Here each keep-alive statement sleeps,
// so the stop always lands on one.
func TestKeepAliveStopKeepsTheHold(t *testing.T) {
	t.Parallel()
	for _, kind := range []dialect.Kind{dialect.Postgres, dialect.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pl, err := pessimistic.New(iso.DB, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer pl.Close()
			tl := &txLocker{Locker: pl.AsLocker(), l: pl, held: map[*dblock.Lease]*pessimistic.Lease{},
				keepAliveQuery: map[dialect.Kind]string{dialect.Postgres: "SELECT pg_sleep(0.05)", dialect.MySQL: "SELECT SLEEP(0.05)"}[kind]}
			for i := range 5 {
				lease, err := tl.Acquire(ctx, "keepalive", dblock.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				stop := tl.keepAlive(lease, 30*time.Millisecond) // a statement every 10 ms
				time.Sleep(25 * time.Millisecond)
				stop()
				if err := lease.Release(ctx); err != nil {
					t.Fatalf("round %d: release after the keep-alive stopped: %v", i, err)
				}
			}
		})
	}
}
