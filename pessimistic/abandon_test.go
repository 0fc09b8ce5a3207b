package pessimistic_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// An abandoned lock wait is ended from the Locker's own connection (on
// MySQL and MariaDB for every wait, armed before the statement; on
// PostgreSQL for Lock's waits inside a hold, and after an acquisition's
// statement was cut off: see TestCancelledWaitLetsGoFirst). When that end reaches the server before the lock statement has
// started (the statement was sent just before the caller's context ended),
// the statement must still not wait out its bound, nor be granted the row
// at the holder's release: the caller has gone. These tests send the end
// before the statement on purpose.

// TestAbandonedWaitEndsEarly: a waiting session whose connection is
// discarded (an acquisition's, on MySQL) runs nothing more; the holder's
// release leaves the row to the next NOWAIT.
func TestAbandonedWaitEndsEarly(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		if iso.Kind != store.MySQL {
			t.Skip("only MySQL and MariaDB end an acquisition's wait from another connection")
		}
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		holder, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tx := beginRaw(t, iso)
		finished := pessimistic.EndWaitOf(l, iso.SessionID(t, ctx, tx.Tx), true)
		if !finished() {
			t.Fatal("the end did not run")
		}
		got := lockInBackground(t, iso, tx, name)
		// Whether the statement is waiting or already refused, the release
		// must leave the row to the next NOWAIT.
		time.Sleep(200 * time.Millisecond)
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err == nil {
			t.Fatal("the abandoned session's lock statement got the row")
		}
		again, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("try after the release: %v", err)
		}
		if err := again.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAbandonedWaitInHoldEndsEarly: a waiting session that lives on (a
// hold's, taking one more row with Lock) is cancelled until its statement
// returns; the session stays usable.
func TestAbandonedWaitInHoldEndsEarly(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		name := randName(t)
		// Held idle for longer than the guard below, so that the server's
		// bound on an idle holder does not free the row first.
		holder, err := l.Acquire(ctx, name, dblock.WithTTL(hangGuard))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Release(ctx) }()
		tx := beginRaw(t, iso)
		finished := pessimistic.EndWaitOf(l, iso.SessionID(t, ctx, tx.Tx), false)
		// Let the first cancel reach the idle session, where it is
		// forgotten; the statement below starts after it.
		time.Sleep(100 * time.Millisecond)
		got := lockInBackground(t, iso, tx, name)
		var lockErr error
		select {
		case lockErr = <-got:
		case <-time.After(hangGuard / 2):
			t.Fatal("the cancelled lock statement went on waiting")
		}
		if !finished() {
			t.Fatal("the end did not run")
		}
		if lockErr == nil {
			t.Fatal("the cancelled lock statement got the row while it was held")
		}
		if iso.Kind == store.Postgres {
			if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			return
		}
		var one int
		if err := tx.QueryRowxContext(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("the session did not live on: %v", err)
		}
	})
}

// beginRaw begins a transaction of the test's own on iso's pool.
func beginRaw(t *testing.T, iso *dbtest.Isolated) *sqlx.Tx {
	t.Helper()
	tx, err := iso.Store().BeginTxx(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// lockInBackground runs dblock's lock statement for name's row in tx,
// waiting up to a minute, and sends its error.
func lockInBackground(t *testing.T, iso *dbtest.Isolated, tx *sqlx.Tx, name string) <-chan error {
	got := make(chan error, 1)
	go func() {
		rl, err := iso.Store().LockRow(testCtx(t), tx, name, store.RowLockParams{Wait: time.Minute})
		if err == nil && !rl.Found {
			err = dblock.ErrNotAcquired
			t.Errorf("the lock statement did not find %s's row", name)
		}
		got <- err
	}()
	return got
}

// TestCancelledWaitLetsGoFirst: once an Acquire whose context ended has
// returned, its server session neither waits for the row nor runs a lock
// statement still in flight, so a release right after leaves the name to
// the next NOWAIT. On PostgreSQL the context ends 20 ms in: some cycles end
// in the wait, some in the NOWAIT before it (on a new connection). pgx's
// cancel of the cut-off statement travels on a connection of its own after
// the call has returned; before the session was ended from the Locker's
// connection, a release in between left the row to it (2 runs in 3 failed).
// On MySQL and MariaDB only the wait's session is ended (a NOWAIT cut off
// in flight ends when the server notices the closed connection), so the
// context ends 150 ms in, in the wait.
func TestCancelledWaitLetsGoFirst(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		holderL := newLocker(t, iso.DB, nil)
		waiterL := newLocker(t, iso.Open(t), nil)
		cancelAfter := 20 * time.Millisecond
		if iso.Kind == store.MySQL {
			cancelAfter = 150 * time.Millisecond
		}
		for i := range 25 {
			name := randName(t)
			holder, err := holderL.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(cancelAfter, cancel)
			_, err = waiterL.Acquire(wctx, name)
			if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait: %v, want ErrNotAcquired and context.Canceled", err)
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			again, err := holderL.TryAcquire(ctx, name)
			if err != nil {
				t.Fatalf("cycle %d: try right after the release: %v, want the name free", i, err)
			}
			if err := again.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
