package optimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestMaxHoldCapsRenewal: a lease with WithMaxHold is renewed past its first
// TTL but never (beyond a round trip) past acquisition + max hold; it then
// ends as expired and the name is free for another owner. Both lease modes
// (optimistic and fair) share the watchdog, so both are checked.
func TestMaxHoldCapsRenewal(t *testing.T) {
	t.Parallel()
	const ttl, maxHold = 600 * time.Millisecond, 1500 * time.Millisecond
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		fair, err := fairqueue.New(iso.DB, &fairqueue.Config{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fair.Close() })
		lockers := map[string]dblock.Locker{"optimistic": newOptimistic(t, iso.DB), "fair": fair}
		for modeName, l := range lockers {
			name := locktest.RandomName("maxhold")
			lease, err := l.Acquire(ctx, name, dblock.WithTTL(ttl), dblock.WithMaxHold(maxHold))
			if err != nil {
				t.Fatalf("%s: acquire: %v", modeName, err)
			}
			first := lockRow(ctx, t, iso, name)
			if got := first.ExpiresAt.Sub(first.AcquiredAt); got > ttl+50*time.Millisecond {
				t.Fatalf("%s: first lease %v, want the TTL %v", modeName, got, ttl)
			}
			renewed := false
			for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
				row := lockRow(ctx, t, iso, name)
				if row.Owner != lease.Owner() {
					break
				}
				if row.ExpiresAt.After(first.ExpiresAt) {
					renewed = true
				}
				// The cap is counted from the acquiring request (local clock), so
				// the database may end the lease up to a round trip after
				// acquired_at + maxHold; a renewal that ignored the cap would
				// go on past it by whole TTLs.
				if cap := row.AcquiredAt.Add(maxHold + time.Second); row.ExpiresAt.After(cap) {
					t.Fatalf("%s: renewed to %v, past acquisition + max hold %v", modeName, row.ExpiresAt, cap)
				}
				if lease.Err() != nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			select {
			case <-lease.Done():
			case <-ctx.Done():
				t.Fatalf("%s: the lease outlived its max hold", modeName)
			}
			if !renewed {
				t.Errorf("%s: the lease was never renewed before its max hold", modeName)
			}
			if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrExpired) {
				t.Errorf("%s: err after the max hold = %v, want ErrLost and ErrExpired", modeName, err)
			}
			next, err := l.Acquire(ctx, name, dblock.WithWait(10*time.Second))
			if err != nil {
				t.Fatalf("%s: another owner after the max hold: %v", modeName, err)
			}
			_ = next.Release(ctx)
		}
	})
}

func lockRow(ctx context.Context, t *testing.T, iso *dbtest.Isolated, name string) store.LockRow {
	t.Helper()
	rows, err := iso.Store().ListLocks(ctx, []string{name})
	if err != nil {
		t.Fatalf("list locks: %v", err)
	}
	if len(rows) != 1 {
		return store.LockRow{}
	}
	return rows[0]
}
