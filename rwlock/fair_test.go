package rwlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/rwlock"
)

// A fair call of an owner that holds the name never queues: a re-entry and
// a downgrade go in past the queue, an upgrade is refused at once; a try
// is refused while fair waiters queue; a waiter whose wait ends, or whose
// Locker closes, leaves the queue.
func TestFairOwnerNeverQueues(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := ctxT(t)
		l := newLocker(t, iso, &rwlock.Config{Fair: true})
		const name = "own"
		w, err := l.TryAcquire(ctx, name, dblock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		queued := make(chan error, 1)
		go func() {
			lease, err := l.Acquire(ctx, name, dblock.WithOwner("other"), dblock.WithWait(30*time.Second))
			if err == nil {
				err = lease.Release(ctx)
			}
			queued <- err
		}()
		dbtest.UntilQueued(t, iso, name, store.WaitExclusive, 1)
		again, err := l.Acquire(ctx, name, dblock.WithOwner("o"), dblock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("re-entry past the queue: %v", err)
		}
		mustRelease(t, ctx, again)
		down, err := l.AcquireRead(ctx, name, dblock.WithOwner("o"), dblock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("downgrade past the queue: %v", err)
		}
		if _, err := l.TryAcquireRead(ctx, name, dblock.WithOwner("newcomer")); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("try while a fair writer queues: %v, want refused", err)
		}
		mustRelease(t, ctx, w)
		if _, err := l.Acquire(ctx, name, dblock.WithOwner("o"), dblock.WithWait(5*time.Second)); !errors.Is(err, rwlock.ErrUpgrade) {
			t.Fatalf("upgrade while a fair writer queues: %v, want ErrUpgrade", err)
		}
		// A reader whose wait ends in the queue leaves it.
		_, err = l.AcquireRead(ctx, name, dblock.WithOwner("late"), dblock.WithWait(100*time.Millisecond))
		if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("read behind a queued writer: %v, want the wait's end", err)
		}
		dbtest.UntilQueued(t, iso, name, store.WaitExclusive, 1)
		mustRelease(t, ctx, down)
		if err := <-queued; err != nil {
			t.Fatalf("queued writer: %v", err)
		}
		dbtest.UntilQueued(t, iso, name, store.WaitExclusive, 0)
		// Close ends a wait in the queue and removes its row.
		hold, err := l.TryAcquire(ctx, name, dblock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		other := newLocker(t, iso, &rwlock.Config{Fair: true})
		closed := make(chan error, 1)
		go func() {
			_, err := other.AcquireRead(ctx, name, dblock.WithOwner("closing"))
			closed <- err
		}()
		dbtest.UntilQueued(t, iso, name, store.WaitExclusive, 1)
		if err := other.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-closed; !errors.Is(err, dblock.ErrClosed) {
			t.Fatalf("wait in the queue at Close: %v, want ErrClosed", err)
		}
		dbtest.UntilQueued(t, iso, name, store.WaitExclusive, 0)
		mustRelease(t, ctx, hold)
	})
}
