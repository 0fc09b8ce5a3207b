package reaper

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestPassLetsFairWaiterProceed queues a live fair waiter behind a crashed
// holder (a lease of an hour) and a crashed waiter (a heartbeat deadline an
// hour away); then both die by the database clock and a pass frees the lease
// and deletes the dead waiter: the live waiter takes the name, with a
// greater token, and the queue is empty. On PostgreSQL the waiter's timers
// are set far beyond the test's guard, so only the pass's notifications can
// wake it in time.
func TestPassLetsFairWaiterProceed(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		name := randomName("fair")
		crashed := acquire(t, db, name, "crashed-holder", time.Hour)
		dbtest.AddWaiter(t, db, name, "crashed-waiter", time.Hour)

		cfg := &fairqueue.Config{Logger: quietLogger(), HeadPollMax: 100 * time.Millisecond, PollMax: 200 * time.Millisecond}
		guard := 2 * time.Minute
		if store.Of(db).Dialect.Caps().Notify {
			cfg.HeadPollMax, cfg.PollMax = 2*time.Minute, 2*time.Minute // jittered: at least a minute
			guard = 50 * time.Second
		}
		fair, err := fairqueue.New(iso.Open(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fair.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		positions := make(chan int, 16)
		type result struct {
			lease *dblock.Lease
			err   error
		}
		done := make(chan result, 1)
		go func() {
			lease, err := fair.Acquire(fairqueue.WithPositionFunc(ctx, func(p fairqueue.Position) { positions <- p.Position }), name)
			done <- result{lease, err}
		}()
		select {
		case p := <-positions:
			if p != 2 {
				t.Fatalf("live waiter queued at %d, want 2 (behind the crashed waiter)", p)
			}
		case r := <-done:
			t.Fatalf("waiter ended before queueing: %+v", r)
		case <-ctx.Done():
			t.Fatal("hang guard: the waiter never queued")
		}

		// Both die by the database clock, long enough ago for the reaper.
		expire(t, db, name, -time.Minute)
		exec(t, db, "UPDATE dblock_waiters SET expires_at = "+shifted(db, 1)+" WHERE owner = "+store.Of(db).Dialect.Placeholder(2),
			(-time.Minute).Microseconds(), "crashed-waiter")
		st := runOnce(t, newReaper(t, iso.Open(t), nil))
		// A check of the live waiter's own may come first and find the dead
		// waiter's heartbeat and the lease expired: it then skips the one
		// and takes the other itself, before the pass frees the lease. Its
		// timer can bring that check where nothing announces the queue's
		// moves, and on PostgreSQL a notification arriving late (its own
		// enqueue's) can.
		if st.ExpiredFreed > 1 || st.WaitersDeleted != 1 {
			t.Fatalf("pass: %+v, want the crashed lease freed (or already taken over by the polling waiter) and the crashed waiter deleted", st)
		}
		var r result
		select {
		case r = <-done:
		case <-ctx.Done():
			t.Fatal("hang guard: the live waiter did not proceed after the pass")
		}
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		if r.lease.Token() <= crashed {
			t.Fatalf("token %d after the crashed holder's %d", r.lease.Token(), crashed)
		}
		if q, err := fairqueue.Queue(ctx, db, name); err != nil || len(q) != 0 || waiters(t, db, name) != 0 {
			t.Fatalf("queue after the take: %+v %v", q, err)
		}
		if err := r.lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
