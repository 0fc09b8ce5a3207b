package dblock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

// holdFence makes another transaction hold the fencing floor's row (as a
// token being issued or a reaper raising the floor does, for one statement)
// until the returned function is called.
func holdFence(t *testing.T, ctx context.Context, db *dialect.DB) (release func()) {
	t.Helper()
	tx, err := store.Of(db).DB.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := "SELECT floor FROM dblock_fence WHERE id = 1 FOR UPDATE"
	if store.Of(db).Dialect.Kind() == store.SQLite {
		q = "UPDATE dblock_fence SET floor = floor WHERE id = 1"
	}
	if _, err := tx.ExecContext(ctx, q); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	return func() { _ = tx.Commit() }
}

// TestFenceContentionEndsInADocumentedResult: while another transaction
// holds the fencing floor's row, acquisitions that run in a transaction of
// their own (optimistic AcquireMany and TryAcquireMany, a fair waiter's take)
// either wait for it within their deadline or report ErrNotAcquired; never a
// raw driver error (MariaDB answered "Error 1180: Got error 1 during COMMIT"
// to a statement that may not wait and skips the locked row inside a
// transaction). PostgreSQL issues tokens from a sequence and has no fence
// row to hold, so the test runs on MySQL/MariaDB and SQLite.
func TestFenceContentionEndsInADocumentedResult(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.MySQL, store.SQLite} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			m := newModes(t, iso)
			opt, fair := m.opt, m.fair
			documented := func(what string, err error) {
				t.Helper()
				if err != nil && !errors.Is(err, dblock.ErrNotAcquired) {
					t.Errorf("%s while the fence row is held: %v, want success or ErrNotAcquired", what, err)
				}
			}
			for round := range 3 {
				a, b := locktest.RandomName("fence-a"), locktest.RandomName("fence-b")
				release := holdFence(t, ctx, iso.DB)
				time.AfterFunc(time.Duration(round)*100*time.Millisecond, release)
				leases, err := opt.TryAcquireMany(ctx, []string{a, b})
				documented("TryAcquireMany", err)
				releaseAll(ctx, leases)

				release = holdFence(t, ctx, iso.DB)
				time.AfterFunc(time.Duration(round)*100*time.Millisecond, release)
				leases, err = opt.AcquireMany(ctx, []string{a, b}, dblock.WithWait(5*time.Second))
				documented("AcquireMany", err)
				releaseAll(ctx, leases)

				// A fair waiter queued behind a holder takes the name in a
				// transaction (take and dequeue) when the holder releases.
				holder, err := fair.TryAcquire(ctx, a)
				if err != nil {
					t.Fatal(err)
				}
				waited := make(chan error, 1)
				go func() {
					l, err := fair.Acquire(ctx, a, dblock.WithWait(5*time.Second))
					if err == nil {
						err = l.Release(ctx)
					}
					waited <- err
				}()
				waitQueued(t, ctx, fair, a)
				release = holdFence(t, ctx, iso.DB)
				time.AfterFunc(time.Duration(round)*100*time.Millisecond, release)
				_ = holder.Release(ctx)
				documented("fair Acquire", <-waited)
			}
		})
	}
}

func releaseAll(ctx context.Context, leases []*dblock.Lease) {
	for _, l := range leases {
		_ = l.Release(ctx)
	}
}

// waitQueued waits until name has a live waiter.
func waitQueued(t *testing.T, ctx context.Context, l *fairqueue.Locker, name string) {
	t.Helper()
	for ctx.Err() == nil {
		q, err := l.Queue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(q) > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no waiter queued")
}
