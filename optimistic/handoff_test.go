package optimistic_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// waitParked waits until n of l's waiters of name sleep in its line.
func waitParked(t *testing.T, l *optimistic.Locker, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for optimistic.Parked(l, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters of %q parked after 10s, want %d", optimistic.Parked(l, name), name, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHandOff: where a release hands over (PostgreSQL), the release of a
// lease whose Locker has a waiter of the name asleep at the head of its
// line makes the name that waiter's lease in the release's own statement:
// the waiter returns with a greater token, its metadata on the row.
// Elsewhere the waiter takes the name itself after the release.
func TestHandOff(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l := newOptimistic(t, iso.DB)
		name := locktest.RandomName("handoff")
		held, err := l.Acquire(ctx, name, dblock.WithOwner("a"))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		got := make(chan *dblock.Lease, 1)
		go func() {
			lease, err := l.Acquire(ctx, name, dblock.WithOwner("b"), dblock.WithMetadata("b's"))
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- lease
		}()
		handsOver := iso.Store().HandsOverLeases()
		if handsOver {
			waitParked(t, l, name, 1)
		} else {
			time.Sleep(50 * time.Millisecond)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		lease := <-got
		if lease == nil {
			return
		}
		if lease.Token() <= held.Token() || lease.Owner() != "b" {
			t.Fatalf("the waiter's lease: token %d owner %q after token %d", lease.Token(), lease.Owner(), held.Token())
		}
		if n := optimistic.Handed(l); handsOver && n != 1 || !handsOver && n != 0 {
			t.Fatalf("%d hand-offs (database hands over: %v)", n, handsOver)
		}
		db := iso.Store()
		var (
			owner, metadata string
			version         int64
		)
		err = db.QueryRowxContext(ctx, db.Rebind("SELECT owner, version, metadata FROM dblock_locks WHERE name = ?"), name).Scan(&owner, &version, &metadata)
		if err != nil || owner != "b" || version != int64(lease.Token()) || metadata != "b's" {
			t.Fatalf("row after the hand-off: %q %d %q %v, want b's lease %d with its metadata", owner, version, metadata, err, lease.Token())
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("the waiter's release: %v", err)
		}
	})
}

// TestHandOffContended: 8 goroutines of one Locker take turns on one name;
// no two hold it at once, tokens grow, and on PostgreSQL most turns are
// hand-offs.
func TestHandOffContended(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		l := newOptimistic(t, iso.DB)
		name := locktest.RandomName("handoffs")
		const goroutines, turns = 8, 25
		var (
			inside atomic.Int32
			mu     sync.Mutex
			last   dblock.Token
			wg     sync.WaitGroup
		)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range turns {
					lease, err := l.Acquire(ctx, name, dblock.WithOwner("g"+string(rune('a'+g))))
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					if inside.Add(1) != 1 {
						t.Errorf("two holders at once")
					}
					mu.Lock()
					if lease.Token() <= last {
						t.Errorf("token %d after %d", lease.Token(), last)
					}
					last = lease.Token()
					mu.Unlock()
					inside.Add(-1)
					if err := lease.Release(ctx); err != nil {
						t.Errorf("release: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		n := optimistic.Handed(l)
		t.Logf("%d of %d turns handed over", n, goroutines*turns)
		if iso.Store().HandsOverLeases() && n < goroutines*turns/4 {
			t.Fatalf("%d of %d turns handed over, want most", n, goroutines*turns)
		}
	})
}

// TestHandOffWaitEnds (PostgreSQL): a waiter whose wait ends while a
// release has claimed it waits for the release's statement before it
// returns, and, handed nothing (another transaction held the row, so the
// statement only released), returns its wait's end; the name is free.
func TestHandOffWaitEnds(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The waiter sleeps long between looks, so that the release finds it
	// asleep.
	l, err := optimistic.New(iso.DB, &optimistic.Config{Logger: testLogger(t), PollMin: 5 * time.Second, PollMax: 10 * time.Second})
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	defer func() { _ = l.Close() }()
	name := locktest.RandomName("handends")
	held, err := l.Acquire(ctx, name, dblock.WithOwner("a"))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(waitCtx, name, dblock.WithOwner("b"))
		if lease != nil {
			_ = lease.Release(ctx)
		}
		got <- err
	}()
	waitParked(t, l, name, 1)
	// Another transaction holds the row: the release's statement waits.
	db := iso.Store()
	blocker, err := db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = blocker.Rollback() }()
	var one, blockerPID int
	if err := blocker.QueryRowxContext(ctx, "SELECT 1, pg_backend_pid() FROM dblock_locks WHERE name = $1 FOR NO KEY UPDATE", name).Scan(&one, &blockerPID); err != nil {
		t.Fatalf("lock the row: %v", err)
	}
	released := make(chan error, 1)
	go func() { released <- held.Release(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for optimistic.Claimed(l, name) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the release did not claim the waiter within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	// The claim comes before the statement is sent: wait until the
	// statement waits for the blocker's row lock, so that the rollback
	// below comes after the statement has found the row held.
	waitBlockedBy(ctx, t, db, blockerPID)
	stop()
	select {
	case err := <-got:
		t.Fatalf("the waiter returned (%v) while the release that claimed it ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := blocker.Rollback(); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if err := <-released; err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := <-got; !errors.Is(err, dblock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter: %v, want ErrNotAcquired and its context's end", err)
	}
	if h, err := db.LeaseHolder(ctx, nil, name); err != nil || h.Held() {
		t.Fatalf("row after the release: %+v %v, want free", h, err)
	}
	if n := optimistic.Handed(l); n != 0 {
		t.Fatalf("%d hand-offs, want none (the row was held elsewhere)", n)
	}
}

// waitBlockedBy waits until a session waits for a lock that the session
// of pid holds.
func waitBlockedBy(ctx context.Context, t *testing.T, db *store.DB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRowxContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid).Scan(&n); err != nil {
			t.Fatalf("read the blocked sessions: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waited for the blocker's row lock within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
