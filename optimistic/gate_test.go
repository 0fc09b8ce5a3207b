package optimistic

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

// lineLen is the number of this Locker's waiters in name's line.
func (l *Locker) lineLen(name string) int {
	l.gates.mu.Lock()
	defer l.gates.mu.Unlock()
	if ln := l.gates.m[name]; ln != nil {
		return len(ln.q)
	}
	return 0
}

// waitLine waits (bounded) until name's line holds n waiters.
func waitLine(t *testing.T, l *Locker, name string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); l.lineLen(name) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("line of %q: %d waiters, want %d", name, l.lineLen(name), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func newGateLocker(t *testing.T, iso *dbtest.Isolated) *Locker {
	t.Helper()
	l, err := New(iso.DB, nil)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return l
}

// waitInLine starts a goroutine that acquires name through l (waiting in
// line), releases it and sends the outcome; it returns once the goroutine
// is in line behind inLine others.
func waitInLine(ctx context.Context, t *testing.T, l *Locker, name string, inLine int) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(ctx, name)
		if err == nil {
			err = lease.Release(ctx)
		}
		done <- err
	}()
	waitLine(t, l, name, inLine+1)
	return done
}

// TestLineOrder: the waiters of one Locker get the name in the order they
// asked for it, and a goroutine that releases and asks again goes to the
// back of the line instead of taking the name straight back.
func TestLineOrder(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		l := newGateLocker(t, iso)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		name := locktest.RandomName("line")
		holder, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		const waiters = 5
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		take := func(i int) error {
			lease, err := l.Acquire(ctx, name)
			if err != nil {
				return err
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return lease.Release(ctx)
		}
		errs := make(chan error, waiters+1)
		for i := range waiters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := take(i); err != nil {
					errs <- err
					return
				}
				if i == 0 {
					// Straight back in: behind everyone who was waiting.
					errs <- take(waiters)
				}
			}()
			waitLine(t, l, name, i+1)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatalf("release holder: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		}
		want := []int{0, 1, 2, 3, 4, waiters}
		if len(order) != len(want) {
			t.Fatalf("acquisition order %v, want %v", order, want)
		}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("acquisition order %v, want %v", order, want)
			}
		}
		if n := l.lineLen(name); n != 0 {
			t.Fatalf("%d waiters left in line after every acquisition", n)
		}
	})
}

// TestLineReentry: an owner that holds the name re-enters at once, even
// with other waiters of the same Locker in line (queueing behind them would
// wait for itself).
func TestLineReentry(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		l := newGateLocker(t, iso)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		name, owner := locktest.RandomName("line-reentry"), dblock.NewOwner()
		outer, err := l.Acquire(ctx, name, dblock.WithOwner(owner))
		if err != nil {
			t.Fatalf("outer: %v", err)
		}
		waited := waitInLine(ctx, t, l, name, 0)
		inner, err := l.Acquire(ctx, name, dblock.WithOwner(owner), dblock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("re-entry with a waiter in line: %v", err)
		}
		if inner.Token() != outer.Token() || inner.Reentry() != 2 {
			t.Fatalf("re-entry: token %d reentry %d, want token %d reentry 2", inner.Token(), inner.Reentry(), outer.Token())
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatalf("release inner: %v", err)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatalf("release outer: %v", err)
		}
		if err := <-waited; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	})
}

// TestLineGiveUp: a waiter that gives up before its turn leaves the line
// (the waiters behind it move up), and its error names the holder.
func TestLineGiveUp(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		l := newGateLocker(t, iso)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		name, owner := locktest.RandomName("line-giveup"), dblock.NewOwner()
		holder, err := l.Acquire(ctx, name, dblock.WithOwner(owner))
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		first := waitInLine(ctx, t, l, name, 0)
		giveUp, stop := context.WithCancel(ctx)
		second := make(chan error, 1)
		go func() {
			_, err := l.Acquire(giveUp, name)
			second <- err
		}()
		waitLine(t, l, name, 2)
		stop()
		err = <-second
		var held *dblock.HeldError
		if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) || !errors.As(err, &held) {
			t.Fatalf("waiter that gave up: %v, want ErrNotAcquired, context.Canceled and a *dblock.HeldError", err)
		}
		if held.Owner != owner {
			t.Fatalf("waiter that gave up names holder %q, want %q", held.Owner, owner)
		}
		waitLine(t, l, name, 1)
		if err := holder.Release(ctx); err != nil {
			t.Fatalf("release holder: %v", err)
		}
		if err := <-first; err != nil {
			t.Fatalf("first waiter: %v", err)
		}
		if n := l.lineLen(name); n != 0 {
			t.Fatalf("%d waiters left in line", n)
		}
	})
}

// TestLineOwnerReenters: a caller whose owner holds the name re-enters at
// once even when waiters of other owners are in this Locker's line, whether
// the hold was taken in another process (another Locker) before the caller
// came, or by a goroutine of the same owner that was ahead of it in line.
// Queueing behind waiters who wait for its own owner would make the caller
// wait for itself.
func TestLineOwnerReenters(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		// The owner holds the name through another Locker (another process).
		l, other := newGateLocker(t, iso), newGateLocker(t, iso)
		name, owner := locktest.RandomName("line-owner"), dblock.NewOwner()
		outer, err := other.Acquire(ctx, name, dblock.WithOwner(owner))
		if err != nil {
			t.Fatalf("outer: %v", err)
		}
		waited := waitInLine(ctx, t, l, name, 0)
		inner, err := l.Acquire(ctx, name, dblock.WithOwner(owner), dblock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("re-entry of a hold taken in another process, with a waiter in line: %v", err)
		}
		if inner.Token() != outer.Token() {
			t.Fatalf("re-entry: token %d, want %d", inner.Token(), outer.Token())
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatalf("release inner: %v", err)
		}
		if err := outer.Release(ctx); err != nil {
			t.Fatalf("release outer: %v", err)
		}
		if err := <-waited; err != nil {
			t.Fatalf("waiter: %v", err)
		}

		// Two goroutines of one owner wait in line with a waiter of another
		// owner between them; when the first takes the name, the second
		// re-enters without waiting for the name to be released.
		name, owner = locktest.RandomName("line-owner2"), dblock.NewOwner()
		holder, err := other.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		first := make(chan *dblock.Lease, 1)
		errs := make(chan error, 3)
		go func() {
			lease, err := l.Acquire(ctx, name, dblock.WithOwner(owner))
			if err != nil {
				errs <- err
				return
			}
			first <- lease
		}()
		waitLine(t, l, name, 1)
		go func() {
			lease, err := l.Acquire(ctx, name)
			if err == nil {
				err = lease.Release(ctx)
			}
			errs <- err
		}()
		waitLine(t, l, name, 2)
		second := make(chan *dblock.Lease, 1)
		go func() {
			lease, err := l.Acquire(ctx, name, dblock.WithOwner(owner))
			if err != nil {
				errs <- err
				return
			}
			second <- lease
		}()
		waitLine(t, l, name, 3)
		if err := holder.Release(ctx); err != nil {
			t.Fatalf("release holder: %v", err)
		}
		var a, b *dblock.Lease
		select {
		case a = <-first:
		case err := <-errs:
			t.Fatalf("waiter: %v", err)
		}
		select {
		case b = <-second:
		case err := <-errs:
			t.Fatalf("waiter: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatalf("the second goroutine of the holding owner did not re-enter while the first held the name")
		}
		if a.Token() != b.Token() {
			t.Fatalf("re-entry: token %d, want %d", b.Token(), a.Token())
		}
		if err := b.Release(ctx); err != nil {
			t.Fatalf("release second: %v", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("release first: %v", err)
		}
		if err := <-errs; err != nil {
			t.Fatalf("waiter of another owner: %v", err)
		}
		if n := l.lineLen(name); n != 0 {
			t.Fatalf("%d waiters left in line", n)
		}
	})
}

// TestKickKept: a release that a reservation kept for an owner outside the
// line (another process's waiter) leaves the head asleep; one kept for a
// waiter of the line, or for nobody, kicks the head, and so does the next
// release that records nothing (the owner is read once).
func TestKickKept(t *testing.T) {
	g := newGates(false)
	head, _ := g.join("n", "a2", store.Holder{})
	g.join("n", "a3", store.Holder{})
	kicked := func() bool {
		select {
		case <-head.kick:
			return true
		default:
			return false
		}
	}
	g.released("n", "b1")
	g.kick("n")
	if kicked() {
		t.Fatal("a release kept for another process's waiter kicked the head")
	}
	g.kick("n")
	if !kicked() {
		t.Fatal("a kick after the kept release's own did not kick the head")
	}
	for _, kept := range []string{"", "a2", "a3"} {
		g.released("n", kept)
		g.kick("n")
		if !kicked() {
			t.Fatalf("a release kept for %q did not kick the head", kept)
		}
	}
	g.released("other", "b1") // No line: nothing recorded, nothing to kick, and no panic.
	g.kick("other")
}
