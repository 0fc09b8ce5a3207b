package fairqueue_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

func countWaiters(t *testing.T, iso *dbtest.Isolated, name string) int {
	t.Helper()
	q := "SELECT COUNT(*) FROM dblock_waiters WHERE name = " + iso.Store().Dialect.Placeholder(1)
	var n int
	if err := iso.Store().GetContext(context.Background(), &n, q, name); err != nil {
		t.Fatalf("count waiters: %v", err)
	}
	return n
}

// TestQueueRules checks who may take a name: a live waiter blocks TryAcquire
// and queues Acquire behind it even while the lock is free; a dead waiter is
// skipped; a waiter that gives up leaves no row.
func TestQueueRules(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l := newFair(t, iso.DB, testConfig(t))
		t.Cleanup(func() { _ = l.Close() })
		name := locktest.RandomName("rules")

		// A live waiter of another process, the lock free.
		ghost, err := iso.Store().Enqueue(ctx, nil, name, "ghost", store.WaitExclusive, time.Minute)
		if err != nil {
			t.Fatalf("enqueue ghost: %v", err)
		}
		if _, err := l.TryAcquire(ctx, name); !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("TryAcquire with a live waiter: %v, want ErrNotAcquired", err)
		}
		_, err = l.Acquire(ctx, name, dblock.WithWait(200*time.Millisecond))
		if !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire behind a live waiter: %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
		if n := countWaiters(t, iso, name); n != 1 {
			t.Fatalf("%d waiter rows after giving up, want only the ghost's", n)
		}
		// A caller whose ctx ends leaves no row either.
		cctx, ccancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := l.Acquire(cctx, name, dblock.WithOwner("quitter"))
			errc <- err
		}()
		for {
			if _, ok, err := l.Position(ctx, name, "quitter"); err != nil {
				t.Fatalf("position: %v", err)
			} else if ok {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		ccancel()
		if err := <-errc; !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire: %v", err)
		}
		if n := countWaiters(t, iso, name); n != 1 {
			t.Fatalf("%d waiter rows after cancelling, want only the ghost's", n)
		}

		// Once the ghost leaves, the name is free for TryAcquire.
		if ok, err := iso.Store().LeaveQueue(ctx, nil, ghost.ID); err != nil || !ok {
			t.Fatalf("leave ghost: %v %v", ok, err)
		}
		lease, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("TryAcquire on an empty queue: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}

		// A dead waiter (heartbeat deadline passed) is skipped by everyone.
		if _, err := iso.Store().Enqueue(ctx, nil, name, "dead", store.WaitExclusive, time.Millisecond); err != nil {
			t.Fatalf("enqueue dead: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
		lease, err = l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("TryAcquire past a dead waiter: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	})
}

// TestPosition checks the queue listing and a waiter's reported place.
func TestPosition(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l := newFair(t, iso.DB, testConfig(t))
		t.Cleanup(func() { _ = l.Close() })
		name := locktest.RandomName("pos")
		held, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		owners := []string{"first", "second", "third"}
		results := make(chan error, len(owners))
		for _, o := range owners {
			go func() {
				lease, err := l.Acquire(ctx, name, dblock.WithOwner(o))
				if err == nil {
					err = lease.Release(ctx)
				}
				results <- err
			}()
			for {
				if _, ok, err := l.Position(ctx, name, o); err != nil {
					t.Fatalf("position: %v", err)
				} else if ok {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		q, err := fairqueue.Queue(ctx, iso.DB, name)
		if err != nil || len(q) != len(owners) {
			t.Fatalf("queue: %+v %v", q, err)
		}
		for i, w := range q {
			if w.Position != i+1 || w.Owner != owners[i] || w.Name != name || w.Waited < 0 || w.CreatedAt.IsZero() {
				t.Fatalf("queue entry %d: %+v", i, w)
			}
		}
		w, ok, err := l.Position(ctx, name, "second")
		if err != nil || !ok || w.Position != 2 {
			t.Fatalf("position of second: %+v %v %v", w, ok, err)
		}
		if _, ok, err := l.Position(ctx, name, "nobody"); err != nil || ok {
			t.Fatalf("position of a stranger: %v %v", ok, err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		for range owners {
			if err := <-results; err != nil {
				t.Fatalf("waiter: %v", err)
			}
		}
		if q, err := l.Queue(ctx, name); err != nil || len(q) != 0 {
			t.Fatalf("queue after the run: %+v %v", q, err)
		}
	})
}

// TestConfig checks the validation of Config.
func TestConfig(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, "sqlite")
	for _, c := range []fairqueue.Config{
		{HeartbeatInterval: -time.Second},
		{HeartbeatInterval: time.Second, HeartbeatTimeout: time.Second},
		{PollMin: time.Second, HeadPollMax: time.Millisecond},
		{HeadPollMax: time.Second, PollMax: time.Millisecond},
	} {
		if _, err := fairqueue.New(iso.DB, &c); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("New(%+v): %v, want ErrInvalidOption", c, err)
		}
	}
	if _, err := fairqueue.New(nil, nil); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
	l, err := fairqueue.New(iso.DB, nil)
	if err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

// TestPositionFunc has two waiters with default (random) owners observe
// their own places while they wait behind a holder: the first sees 1, the
// second 2 and then 1 once the first took its turn. A caller that finds the
// name free takes it without queueing and observes nothing.
func TestPositionFunc(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l := newFair(t, iso.DB, testConfig(t))
		t.Cleanup(func() { _ = l.Close() })
		name := locktest.RandomName("posfunc")
		held, err := l.Acquire(ctx, name)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		type seen struct {
			positions []int
			owner     string
			joined    time.Time
		}
		var mu sync.Mutex
		views := make([]seen, 2)
		queued := make(chan int, 2)
		done := make(chan error, 2)
		var first *dblock.Lease
		for i := range views {
			pctx := fairqueue.WithPositionFunc(ctx, func(p fairqueue.Position) {
				mu.Lock()
				defer mu.Unlock()
				if p.Name != name || p.Owner == "" || p.Joined.IsZero() || p.Waited < 0 {
					t.Errorf("waiter %d observed %+v", i, p)
				}
				if len(views[i].positions) == 0 {
					views[i].owner, views[i].joined = p.Owner, p.Joined
					queued <- i
				}
				views[i].positions = append(views[i].positions, p.Position)
			})
			go func() {
				lease, err := l.Acquire(pctx, name)
				if err == nil && i == 0 {
					first = lease // Held until the second waiter saw itself move up.
				} else if err == nil {
					err = lease.Release(ctx)
				}
				done <- err
			}()
			select {
			case <-queued: // In the queue before the next one arrives.
			case <-ctx.Done():
				t.Fatal("hang guard: the waiter never observed its place")
			}
		}
		if err := held.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("first waiter: %v", err)
		}
		// The second waiter moves up to 1 while the first holds the name.
		for {
			mu.Lock()
			p := views[1].positions
			mu.Unlock()
			if len(p) > 0 && p[len(p)-1] == 1 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("hang guard: the second waiter observed %v, never 1", p)
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err := first.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("second waiter: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if got := views[0].positions; len(got) != 1 || got[0] != 1 {
			t.Fatalf("first waiter observed %v, want [1]", got)
		}
		if got := views[1].positions; len(got) != 2 || got[0] != 2 || got[1] != 1 {
			t.Fatalf("second waiter observed %v, want [2 1]", got)
		}
		if views[0].owner == views[1].owner || views[1].joined.Before(views[0].joined) {
			t.Fatalf("views %+v: want two owners, joined in order", views)
		}
		// Free name: taken directly, nothing observed.
		calls := 0
		lease, err := l.Acquire(fairqueue.WithPositionFunc(ctx, func(fairqueue.Position) { calls++ }), name)
		if err != nil || calls != 0 {
			t.Fatalf("acquire of a free name: %v, %d observations", err, calls)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
