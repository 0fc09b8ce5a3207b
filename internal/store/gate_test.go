package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// The fair queue's kinds: readers queued together are not in each other's
// way, a writer waits for everyone ahead, a reader for the writers ahead,
// and a semaphore's requests queue apart from the lock of the same name
// (and the fair mode's statements do not count them).
func TestGateStatements(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		db := store.Of(iso.DB)
		const name = "g"
		enqueue := func(owner string, kind store.WaitKind, ttl time.Duration) int64 {
			t.Helper()
			w, err := db.Enqueue(ctx, nil, name, owner, kind, ttl)
			if err != nil {
				t.Fatalf("enqueue %s: %v", owner, err)
			}
			return w.ID
		}
		check := func(id int64, live bool, ahead int) {
			t.Helper()
			s, err := db.CheckGate(ctx, id)
			if err != nil {
				t.Fatalf("check %d: %v", id, err)
			}
			if s.Live != live || s.Queued != ahead {
				t.Fatalf("check %d = %+v, want live %v and %d ahead in its way", id, s, live, ahead)
			}
		}
		peek := func(kind store.WaitKind, owner string, queued int, holds bool) {
			t.Helper()
			s, err := db.PeekGate(ctx, name, kind, owner)
			if err != nil {
				t.Fatalf("peek %s: %v", kind, err)
			}
			if s.Queued != queued || s.OwnerHolds != holds {
				t.Fatalf("peek %s by %s = %+v, want %d in the way, holds %v", kind, owner, s, queued, holds)
			}
		}
		peek(store.WaitRead, "x", 0, false)
		sem := enqueue("s1", store.WaitSemaphore, time.Minute)
		r1 := enqueue("r1", store.WaitRead, time.Minute)
		r2 := enqueue("r2", store.WaitRead, time.Minute)
		w3 := enqueue("w3", store.WaitExclusive, time.Minute)
		r4 := enqueue("r4", store.WaitRead, time.Minute)
		check(sem, true, 0)
		check(r1, true, 0)
		check(r2, true, 0)
		check(w3, true, 2)
		check(r4, true, 1)
		peek(store.WaitRead, "x", 1, false)
		peek(store.WaitExclusive, "x", 4, false)
		peek(store.WaitSemaphore, "x", 1, false)
		// The fair mode's own view leaves the semaphore's request out.
		if s, err := db.PeekQueue(ctx, nil, name); err != nil || s.Ahead != 4 {
			t.Fatalf("fairqueue peek = %+v, %v; want the 4 waiters of the lock", s, err)
		}
		if s, err := db.CheckWaiter(ctx, nil, name, r1); err != nil || s.Ahead != 0 {
			t.Fatalf("fairqueue check of the first reader = %+v, %v; want none ahead", s, err)
		}
		// A dead waiter is out of everyone's way, and dead itself.
		dead := enqueue("dead", store.WaitExclusive, time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		check(dead, false, 0)
		if _, err := db.LeaveQueue(ctx, nil, w3); err != nil {
			t.Fatal(err)
		}
		check(r4, true, 0)
		check(w3, false, 0)
		// An owner holding the name, exclusively or as a reader.
		res, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "holder", Mode: dblock.ModeOptimistic, TTL: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire: %+v, %v", res, err)
		}
		peek(store.WaitExclusive, "holder", 3, true)
		peek(store.WaitSemaphore, "holder", 1, false)
	})
}
