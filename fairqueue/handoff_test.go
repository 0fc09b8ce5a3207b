package fairqueue_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
)

// waitParked waits until n of l's waiters of name sleep in its line.
func waitParked(t *testing.T, l *fairqueue.Locker, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fairqueue.Parked(l, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters of %q parked after 10s, want %d", fairqueue.Parked(l, name), name, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// quietWaiters is testConfig with timers that do not fire within a test:
// a waiter wakes only for its events, and sends no heartbeat, so the
// statements a test counts around a release are the release's and the
// take's alone (a machine stalled between the waiter's parking and the
// release would otherwise let the waiter's own look or heartbeat in).
func quietWaiters(t *testing.T) *fairqueue.Config {
	cfg := testConfig(t)
	cfg.PollMin, cfg.HeadPollMax, cfg.PollMax = 20*time.Second, 20*time.Second, 20*time.Second
	cfg.HeartbeatInterval, cfg.HeartbeatTimeout = 20*time.Second, time.Minute
	return cfg
}

// TestHandOff: where a release hands over (PostgreSQL), the release of a
// lease whose Locker has a waiter of the name asleep, first in the queue,
// makes the name that waiter's lease in the release's own statement: the
// waiter returns with a larger token having sent nothing, one statement for
// the release and the take. Elsewhere the waiter takes the name itself
// after the release.
func TestHandOff(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l := newFair(t, iso.DB, quietWaiters(t))
		t.Cleanup(func() { _ = l.Close() })
		name := locktest.RandomName("handoff")
		held, err := l.Acquire(ctx, name, dblock.WithOwner("a"))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		got := make(chan *dblock.Lease, 1)
		go func() {
			lease, err := l.Acquire(ctx, name, dblock.WithOwner("b"))
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- lease
		}()
		handsOver := iso.Store().HandsOver()
		if handsOver {
			waitParked(t, l, name, 1)
		} else {
			time.Sleep(50 * time.Millisecond)
		}
		before := l.Stats().Statements
		if err := held.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		lease := <-got
		if lease == nil {
			return
		}
		defer func() { _ = lease.Release(ctx) }()
		sent := l.Stats().Statements - before
		if lease.Token() <= held.Token() || lease.Owner() != "b" {
			t.Fatalf("the waiter's lease: token %d owner %q after token %d", lease.Token(), lease.Owner(), held.Token())
		}
		if handsOver && sent != 1 {
			t.Fatalf("%d statements for the release and the waiter's take, want 1 (the hand-off)", sent)
		}
		if n := countWaiters(t, iso, name); n != 0 {
			t.Fatalf("%d waiter rows after the hand-off", n)
		}
	})
}

// TestHandOffRacesGivingUp: waiters whose waits end at random moments,
// some while a release may be handing them the name, never overlap, and
// each either returns a lease it holds or an error leaving it nothing: at
// the end the name is free and its queue empty.
func TestHandOffRacesGivingUp(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		l := newFair(t, iso.DB, testConfig(t))
		t.Cleanup(func() { _ = l.Close() })
		name := locktest.RandomName("handoff-race")
		var inside, acquired, gaveUp atomic.Int64
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					wait := time.Duration(rand.IntN(4000)) * time.Microsecond
					lease, err := l.Acquire(ctx, name, dblock.WithWait(wait), dblock.WithOwner(locktest.RandomName("w")))
					if errors.Is(err, dblock.ErrNotAcquired) {
						gaveUp.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("goroutine %d, acquisition %d: %v", g, i, err)
						return
					}
					if inside.Add(1) != 1 {
						t.Errorf("two holders at once")
					}
					acquired.Add(1)
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					inside.Add(-1)
					if err := lease.Release(ctx); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		if acquired.Load() == 0 || gaveUp.Load() == 0 {
			t.Fatalf("%d acquired, %d gave up: the race needs both", acquired.Load(), gaveUp.Load())
		}
		if h, err := iso.Store().LeaseHolder(ctx, nil, name); err != nil || h.Held() {
			t.Fatalf("the name after the race: %+v %v", h, err)
		}
		if n := countWaiters(t, iso, name); n != 0 {
			t.Fatalf("%d waiter rows after the race", n)
		}
	})
}
