package fairqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestMergedNotifications: on PostgreSQL, a waiter second in line behind a
// held lock needs two events (the waiter ahead leaves, the lock is
// released) before it looks again, but notifications merge (PostgreSQL
// delivers one per transaction and payload, and a waiter's wake-up channel
// holds one): here both events come in one transaction with one
// notification. The waiter must still go ahead at once, not sleep to its
// timer, which is set far beyond the test's guard.
func TestMergedNotifications(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := "merged-notifications"
	// Held for an hour; the transaction below frees the name under it.
	holder := holdBehind(ctx, t, iso, name, "gone-waiter")
	fair := slowTimers(t, iso, false)
	warmUp(ctx, t, holder, fair)
	done := queueSecond(ctx, t, fair, name)
	time.Sleep(200 * time.Millisecond) // Its first sleep begins.

	tx, err := iso.Store().BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL WHERE name = $1`,
		`DELETE FROM dblock_waiters WHERE name = $1 AND owner = 'gone-waiter'`,
		`SELECT pg_notify('` + store.NotifyChannel + `', $1)`,
	} {
		if _, err := tx.ExecContext(ctx, q, name); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := awaitTake(done); err != nil {
		t.Fatalf("the waiter slept past one notification that merged two events: %v", err)
	}
}

// holdBehind has a Locker of its own hold name for an hour, with a live
// waiter row of owner ahead of anyone who queues next, as another
// process's would be; it returns the holder.
func holdBehind(ctx context.Context, t *testing.T, iso *dbtest.Isolated, name, owner string) *fairqueue.Locker {
	t.Helper()
	holder, err := fairqueue.New(iso.Open(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	if _, err := holder.Acquire(ctx, name, dblock.WithTTL(time.Hour), dblock.WithMaxHold(time.Hour)); err != nil {
		t.Fatal(err)
	}
	dbtest.AddWaiter(t, iso.DB, name, owner, time.Hour)
	return holder
}

// slowTimers opens a Locker whose waiters' timers, but for the head's
// first steps, run far beyond awaitTake's guard (without notifications
// where quiet).
func slowTimers(t *testing.T, iso *dbtest.Isolated, quiet bool) *fairqueue.Locker {
	t.Helper()
	fair, err := fairqueue.New(iso.Open(t), &fairqueue.Config{HeadPollMax: 2 * time.Minute, PollMax: 2 * time.Minute, DisableNotify: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fair.Close() })
	return fair
}

// queueSecond has fair acquire name (then release it) in the background,
// and returns once the waiter queued second in line; the channel gives the
// acquisition's outcome.
func queueSecond(ctx context.Context, t *testing.T, fair *fairqueue.Locker, name string) <-chan error {
	t.Helper()
	positions := make(chan int, 16)
	done := make(chan error, 1)
	go func() {
		lease, err := fair.Acquire(fairqueue.WithPositionFunc(ctx, func(p fairqueue.Position) { positions <- p.Position }), name)
		if err == nil {
			err = lease.Release(context.Background())
		}
		done <- err
	}()
	select {
	case p := <-positions:
		if p != 2 {
			t.Fatalf("queued at %d, want 2", p)
		}
	case err := <-done:
		t.Fatalf("ended before queueing: %v", err)
	}
	return done
}

// errNoTake: the acquisition queueSecond started did not end within
// awaitTake's guard.
var errNoTake = errors.New("no take within 10 s")

// awaitTake waits, within a guard far shorter than the waiter's timers, for
// the acquisition queueSecond started, and returns its error, or errNoTake.
func awaitTake(done <-chan error) error {
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		return errNoTake
	}
}

// warmUp has fair wait once for a name holder holds, so that fair's
// listening connection is up (and its wake-up of every waiter on connecting
// spent) before the test's waiter queues.
func warmUp(ctx context.Context, t *testing.T, holder, fair *fairqueue.Locker) {
	t.Helper()
	lease, err := holder.Acquire(ctx, "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		l, err := fair.Acquire(ctx, "warm-up")
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
