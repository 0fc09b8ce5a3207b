package dblocktest_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dblocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangGuard bounds every wait; a guard against hangs, not a timing assertion.
const hangGuard = time.Minute

func setup(t *testing.T) (context.Context, *dblocktest.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	l := dblocktest.New(nil)
	t.Cleanup(func() { _ = l.Close() })
	return ctx, l
}

// got returns a function that fails t on an error and returns the lease.
func got(t *testing.T) func(*dblock.Lease, error) *dblock.Lease {
	return func(lease *dblock.Lease, err error) *dblock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestExclusion: many goroutines on one name never hold it together, and
// every grant's token is greater than the one before.
func TestExclusion(t *testing.T) {
	ctx, l := setup(t)
	var (
		inside atomic.Int32
		mu     sync.Mutex
		last   dblock.Token
		wg     sync.WaitGroup
	)
	for range 16 {
		wg.Go(func() {
			for range 50 {
				lease := got(t)(l.Acquire(ctx, "job"))
				if inside.Add(1) != 1 {
					t.Error("two holders at once")
				}
				mu.Lock()
				if lease.Token() <= last {
					t.Errorf("token %d after %d", lease.Token(), last)
				}
				last = lease.Token()
				mu.Unlock()
				inside.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// TestReentryAndTry: the same owner re-enters; another owner's try is
// refused with the holder named; the last release frees the name.
func TestReentryAndTry(t *testing.T) {
	ctx, l := setup(t)
	a := got(t)(l.Acquire(ctx, "n", dblock.WithOwner("a")))
	b := got(t)(l.Acquire(ctx, "n", dblock.WithOwner("a")))
	if b.Reentry() != 2 || b.Token() != a.Token() {
		t.Fatalf("re-entry %d token %d, want 2 and %d", b.Reentry(), b.Token(), a.Token())
	}
	_, err := l.TryAcquire(ctx, "n", dblock.WithOwner("x"))
	var held *dblock.HeldError
	if !errors.As(err, &held) || held.Owner != "a" || !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("try by another owner: %v", err)
	}
	noErr(t, b.Release(ctx))
	if _, err := l.TryAcquire(ctx, "n", dblock.WithOwner("x")); err == nil {
		t.Fatal("the name freed after the inner release")
	}
	noErr(t, a.Release(ctx))
	if err := a.Release(ctx); !errors.Is(err, dblock.ErrReleased) {
		t.Fatalf("second release: %v", err)
	}
	got(t)(l.TryAcquire(ctx, "n", dblock.WithOwner("x")))
	if _, err := l.TryAcquire(ctx, ""); !errors.Is(err, dblock.ErrInvalidName) {
		t.Fatalf("empty name: %v", err)
	}
}

// TestWaits: a waiter is woken by the release; a wait ends with its
// context, naming the holder and the cause.
func TestWaits(t *testing.T) {
	ctx, l := setup(t)
	held := got(t)(l.Acquire(ctx, "n"))
	next := make(chan *dblock.Lease)
	go func() {
		lease, err := l.Acquire(ctx, "n")
		if err != nil {
			t.Error(err)
		}
		next <- lease
	}()
	noErr(t, held.Release(ctx))
	noErr(t, (<-next).Release(ctx))

	held = got(t)(l.Acquire(ctx, "n"))
	wctx, cancel := context.WithCancelCause(ctx)
	cause := errors.New("shutting down")
	cancel(cause)
	if _, err := l.Acquire(wctx, "n"); !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, cause) {
		t.Fatalf("cancelled wait: %v", err)
	}
	noErr(t, held.Release(ctx))
}

// TestClockAndFaults: leases live while the clock moves, run out once
// renewals stop or the cap comes, and end at once by each fault, with its
// reason; injected acquire failures come first, in order.
func TestClockAndFaults(t *testing.T) {
	ctx, l := setup(t)
	clock := l.Clock()
	lease := got(t)(l.Acquire(ctx, "n", dblock.WithTTL(10*time.Second)))
	clock.Advance(time.Hour)
	if lease.Err() != nil {
		t.Fatalf("a renewed lease ended: %v", lease.Err())
	}
	l.Database().StopRenewing("n")
	clock.Advance(9 * time.Second)
	if lease.Err() != nil {
		t.Fatal("the lease ended before its expiry")
	}
	clock.Advance(time.Second)
	lost(t, lease, dblock.ErrExpired)

	capped := got(t)(l.Acquire(ctx, "c", dblock.WithTTL(10*time.Second), dblock.WithMaxHold(15*time.Second)))
	clock.Advance(10 * time.Second)
	clock.Advance(5 * time.Second)
	lost(t, capped, dblock.ErrExpired)

	for _, c := range []struct {
		fault  func(string) bool
		reason error
	}{{l.Database().Expire, dblock.ErrExpired}, {l.Database().ForceRelease, dblock.ErrForceReleased}, {l.Database().DropConnection, dblock.ErrConnLost}} {
		lease := got(t)(l.Acquire(ctx, "f"))
		if !c.fault("f") {
			t.Fatal("fault on a held name reported false")
		}
		lost(t, lease, c.reason)
	}
	lease = got(t)(l.Acquire(ctx, "t"))
	if token := l.Database().TakeOver("t", "other"); token <= lease.Token() {
		t.Fatalf("takeover token %d, want above %d", token, lease.Token())
	}
	lost(t, lease, dblock.ErrTakenOver)
	if hs := l.Database().Holders(); len(hs) != 1 || hs[0].Name != "t" || hs[0].Owner != "other" {
		t.Fatalf("holders: %+v", hs)
	}

	boom := errors.New("boom")
	l.Database().FailAcquires(nil, boom)
	if _, err := l.Acquire(ctx, "u"); !errors.Is(err, dblock.ErrUnavailable) {
		t.Fatalf("first injected failure: %v", err)
	}
	if _, err := l.Acquire(ctx, "u"); !errors.Is(err, dblock.ErrUnavailable) || !errors.Is(err, boom) {
		t.Fatalf("second injected failure: %v", err)
	}
	got(t)(l.Acquire(ctx, "u"))
}

func lost(t *testing.T, lease *dblock.Lease, reason error) {
	t.Helper()
	select {
	case <-lease.Done():
	default:
		t.Fatal("the lease did not end")
	}
	if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, reason) {
		t.Fatalf("Err %v, want ErrLost and %v", err, reason)
	}
}

// TestDoAndClose: Do's fn sees the loss as its context's cause; Close ends
// the leases still held and the waits in progress.
func TestDoAndClose(t *testing.T) {
	ctx, l := setup(t)
	err := l.Do(ctx, "d", func(ctx context.Context) error {
		l.Database().Expire("d")
		<-ctx.Done()
		return context.Cause(ctx)
	})
	if !errors.Is(err, dblock.ErrExpired) {
		t.Fatalf("Do: %v", err)
	}
	held := got(t)(l.Acquire(ctx, "w"))
	waited := make(chan error)
	go func() {
		_, err := l.Acquire(ctx, "w", dblock.WithOwner("b"))
		waited <- err
	}()
	noErr(t, l.Close())
	if err := <-waited; !errors.Is(err, dblock.ErrClosed) {
		t.Fatalf("wait ended by Close: %v", err)
	}
	lost(t, held, dblock.ErrClosed)
}

// TestHooks: the hooks hear acquisitions, releases and losses.
func TestHooks(t *testing.T) {
	var acquired, released, lostN atomic.Int32
	ctx := context.Background()
	l := dblocktest.New(&dblocktest.Config{Hooks: &dblock.Hooks{
		OnAcquired: func(string, string, dblock.Token, time.Duration) { acquired.Add(1) },
		OnReleased: func(string, string, dblock.Token, time.Duration) { released.Add(1) },
		OnLost:     func(string, string, dblock.Token, error) { lostN.Add(1) },
	}})
	defer l.Close()
	lease := got(t)(l.Acquire(ctx, "h"))
	noErr(t, lease.Release(ctx))
	got(t)(l.Acquire(ctx, "h"))
	l.Database().Expire("h")
	if acquired.Load() != 2 || released.Load() != 1 || lostN.Load() != 1 {
		t.Fatalf("hooks: acquired %d released %d lost %d, want 2 1 1", acquired.Load(), released.Load(), lostN.Load())
	}
}
