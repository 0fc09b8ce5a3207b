package fairqueue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/handoff"
	"github.com/dblock-go/dblock/internal/store"
)

// TestHandOverFailureReleases: a hand-off statement that fails (here
// MariaDB's call, refusing a mode longer than its parameter) did nothing;
// the release goes on as a plain release, and the claimed waiter sleeps on,
// claimable again, its row kept.
func TestHandOverFailureReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := handingLocker(t, store.MySQL)
	const name = "hand-over-fails"
	lease, err := l.Acquire(ctx, name, dblock.WithOwner("a"))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := l.db.Enqueue(ctx, nil, name, "b", store.WaitExclusive, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s := &slot{id: tk.ID, created: time.Now(), Slot: handoff.Slot{State: handoff.Parked, Wake: make(chan struct{}, 1)},
		params: store.AcquireParams{Name: name, Owner: "b", Mode: strings.Repeat("m", 200), TTL: time.Minute}}
	l.line.join(name, s)
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release with a failing hand-off: %v", err)
	}
	if h, err := l.db.LeaseHolder(ctx, nil, name); err != nil || h.Held() {
		t.Fatalf("the name after the release: %+v %v", h, err)
	}
	if c, err := l.db.CheckWaiter(ctx, nil, name, tk.ID); err != nil || !c.Live {
		t.Fatalf("the waiter after a failed hand-off: %+v %v", c, err)
	}
	if s.State != handoff.Parked || s.Result != nil {
		t.Fatalf("the claimed waiter after a failed hand-off: state %d, result %+v", s.State, s.Result)
	}
}

// handingLocker is a Locker on a new database of kind whose releases hand
// over; the test is skipped where they cannot (MySQL 8).
func handingLocker(t *testing.T, kind store.Kind) *Locker {
	t.Helper()
	l, err := New(dbtest.New(t, kind).DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if l.rows == nil {
		t.Skip("MySQL 8 hands nothing over")
	}
	return l
}

// TestHandingSettles: every hand-off a release starts ends in the line's
// count (line.handing), whether it handed the name or not, so that no
// name's notifications stay taken for echoes of hand-offs (queueWait.echo)
// once its contention is over.
func TestHandingSettles(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			l := handingLocker(t, kind)
			const name = "handing-settles"
			seen := watchHanding(t, l, name, contend(t, l, name, 4, 40))
			if !seen {
				t.Fatal("160 contended acquisitions: no hand-off seen under way")
			}
			l.line.mu.Lock()
			defer l.line.mu.Unlock()
			if n := len(l.line.handing); n != 0 {
				t.Fatalf("after the contention: %d names with hand-offs under way (%v), want none", n, l.line.handing)
			}
		})
	}
}

// contend runs workers goroutines each acquiring and releasing name n
// times; the channel closes when they are done.
func contend(t *testing.T, l *Locker, name string, workers, n int) <-chan struct{} {
	done := make(chan struct{})
	errs := make(chan error, workers)
	go func() {
		defer close(done)
		for range workers {
			go func() {
				for range n {
					lease, err := l.Acquire(context.Background(), name)
					if err == nil {
						err = lease.Release(context.Background())
					}
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range workers {
			if err := <-errs; err != nil {
				t.Errorf("acquire and release: %v", err)
			}
		}
	}()
	return done
}

// watchHanding polls whether a hand-off of name is under way until done
// closes, and reports whether it ever was.
func watchHanding(t *testing.T, l *Locker, name string, done <-chan struct{}) (seen bool) {
	t.Helper()
	for {
		select {
		case <-done:
			return seen
		default:
		}
		seen = seen || l.line.handingOver(name)
		time.Sleep(50 * time.Microsecond)
	}
}
