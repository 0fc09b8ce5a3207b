package pessimistic_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestLeaseLock: Lock takes more names in the held transaction, creating
// their rows; they are released with the lock; a lease holder refuses.
func TestLeaseLock(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		other := newLocker(t, iso.Open(t), nil)
		a, b, c, leased := randName(t), randName(t), randName(t), randName(t)
		r, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: leased, Owner: "leaser", Mode: dblock.ModeOptimistic, TTL: time.Minute})
		if err != nil || !r.Acquired {
			t.Fatalf("lease: %+v %v", r, err)
		}
		lease, err := l.Acquire(ctx, a, dblock.WithToken())
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if iso.Kind == store.SQLite {
			// A lock with tokens cannot take more names on SQLite.
			if err := lease.Lock(ctx, b); !errors.Is(err, dblock.ErrInvalidOption) {
				t.Fatalf("lock with tokens on SQLite: %v, want ErrInvalidOption", err)
			}
			_ = lease.Release(ctx)
			if lease, err = l.Acquire(ctx, a); err != nil {
				t.Fatalf("acquire: %v", err)
			}
		}
		if err := lease.Lock(ctx, c, b, a); err != nil {
			t.Fatalf("lock b, c: %v", err)
		}
		want := []string{a, b, c}
		slices.Sort(want)
		if got := lease.Names(); !slices.Equal(got, want) {
			t.Fatalf("names %v, want %v", got, want)
		}
		if iso.Kind != store.SQLite {
			if lease.TokenOf(b) <= 0 || lease.TokenOf(c) <= 0 {
				t.Fatalf("tokens of the added names: %d %d", lease.TokenOf(b), lease.TokenOf(c))
			}
			if _, err := other.TryAcquire(ctx, b); !errors.Is(err, dblock.ErrNotAcquired) {
				t.Fatalf("try b while locked: %v, want ErrNotAcquired", err)
			}
		}
		var he *dblock.HeldError
		if err := lease.Lock(ctx, leased); !errors.Is(err, dblock.ErrNotAcquired) || !errors.As(err, &he) || he.Owner != "leaser" {
			t.Fatalf("lock a leased name: %v, want ErrNotAcquired naming the lease holder", err)
		}
		// The hold is intact after the refusal.
		if _, err := lease.Tx().ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatalf("statement after the refusal: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		for _, n := range want {
			next, err := other.TryAcquire(ctx, n)
			if err != nil {
				t.Fatalf("try %q after release: %v", n, err)
			}
			_ = next.Release(ctx)
		}
		if err := lease.Lock(ctx, b); !errors.Is(err, dblock.ErrReleased) {
			t.Fatalf("lock after release: %v, want ErrReleased", err)
		}
		if err := lease.Lock(ctx, ""); !errors.Is(err, dblock.ErrInvalidName) {
			t.Fatalf("lock an empty name: %v, want ErrInvalidName", err)
		}
	})
}

// TestTryLockBusy: TryLock on a name another transaction holds fails at once
// and the hold keeps what it had.
func TestTryLockBusy(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, &pessimistic.Config{LockTimeout: 200 * time.Millisecond})
		other := newLocker(t, iso.Open(t), nil)
		a, b := randName(t), randName(t)
		held, err := other.Acquire(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Release(ctx) }()
		// The set-up's acquire waits as long as it needs (a loaded machine
		// can take more than the 200 ms LockTimeout to create a row); the
		// bound is for the Lock calls below.
		lease, err := l.Acquire(ctx, a, dblock.WithWait(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.TryLock(ctx, b); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("try lock a held name: %v, want ErrNotAcquired", err)
		}
		if err := lease.Lock(ctx, b, a); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("lock a held name past the lock timeout: %v, want ErrNotAcquired", err)
		}
		// A wait ended by ctx (not by the server's bound) leaves the hold
		// intact too.
		l2 := newLocker(t, iso.DB, nil)
		lease2, err := l2.Acquire(ctx, randName(t))
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithCancel(ctx)
		defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
		if err := lease2.Lock(short, b); !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("lock cancelled by ctx: %v, want ErrNotAcquired and context.Canceled", err)
		}
		if _, err := lease2.Tx().ExecContext(ctx, "SELECT 1"); err != nil || lease2.Err() != nil {
			t.Fatalf("hold after a cancelled Lock: %v, %v", err, lease2.Err())
		}
		_ = lease2.Release(ctx)
		if err := lease.Err(); err != nil {
			t.Fatalf("hold after the refusals: %v", err)
		}
		if _, err := other.TryAcquire(ctx, a); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("a after the refusals: %v, want still held", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	})
}

// TestLockDeadlock: the natural pattern, holder of A locking B while the
// holder of B locks A, is a deadlock the database detects: one side gets
// ErrDeadlock, the other proceeds. On PostgreSQL the victim keeps its first
// name; on MySQL its transaction is rolled back, so its lock is lost.
func TestLockDeadlock(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l1 := newLocker(t, iso.DB, nil)
		l2 := newLocker(t, iso.Open(t), nil)
		a, b := randName(t), randName(t)
		la, err := l1.Acquire(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := l2.Acquire(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, c := range []struct {
			lease *pessimistic.Lease
			other string
		}{{la, b}, {lb, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.lease.Lock(ctx, c.other)
				if errs[i] == nil {
					return
				}
				if iso.Kind == store.MySQL {
					if err := c.lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, pessimistic.ErrTxEnded) {
						t.Errorf("victim's lease on MySQL: %v, want ErrLost with ErrTxEnded", err)
					}
					if _, err := c.lease.Tx().ExecContext(ctx, "SELECT 1"); err == nil {
						t.Errorf("statement on the victim's ended transaction succeeded")
					}
				} else if err := c.lease.Err(); err != nil {
					t.Errorf("victim's lease on PostgreSQL: %v, want still held", err)
				}
				// The victim gives its lock up so that the other proceeds.
				_ = c.lease.Rollback(ctx)
			}()
		}
		wg.Wait()
		deadlocks := 0
		for _, err := range errs {
			if errors.Is(err, dblock.ErrDeadlock) {
				deadlocks++
			} else if err != nil {
				t.Errorf("unexpected error: %v", err)
			}
		}
		if deadlocks != 1 {
			t.Fatalf("%d deadlock errors (%v), want exactly 1", deadlocks, errs)
		}
		_ = la.Release(ctx)
		_ = lb.Release(ctx)
	})
}

// TestLockWithEndedContext: Lock called with a context that has already
// ended is refused with ErrNotAcquired and the context's cause, on every
// path (MySQL checks the rows before locking them), and the hold keeps what
// it had.
func TestLockWithEndedContext(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		lease, err := l.Acquire(ctx, randName(t))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lease.Release(ctx) }()
		ended, cancel := context.WithCancel(ctx)
		cancel()
		if err := lease.Lock(ended, randName(t)); !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock with an ended context: %v, want ErrNotAcquired and context.Canceled", err)
		}
		if _, err := lease.Tx().ExecContext(ctx, "SELECT 1"); err != nil || lease.Err() != nil {
			t.Fatalf("hold after the refused Lock: %v, %v", err, lease.Err())
		}
	})
}
