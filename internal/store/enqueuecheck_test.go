package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestEnqueueChecked: where a waiter's insert answers its first check in
// the same statement (PostgreSQL, MariaDB), the answer is the check's: the waiters
// ahead in its kind's way, the nearest one's deadline, the lock row.
// Elsewhere it refuses and inserts nothing.
func TestEnqueueChecked(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		ctx := context.Background()
		const name = "enqueue-checked"
		if !db.EnqueuesChecked() {
			if _, _, err := db.EnqueueChecked(ctx, name, "a", store.WaitExclusive, time.Minute); err == nil {
				t.Fatalf("EnqueueChecked on %s: no refusal", iso.Kind)
			}
			if s, err := db.PeekQueue(ctx, nil, name); err != nil || s.Ahead != 0 {
				t.Fatalf("the queue after a refused EnqueueChecked: %+v %v", s, err)
			}
			return
		}
		first, s, err := db.EnqueueChecked(ctx, name, "first", store.WaitExclusive, time.Minute)
		if err != nil || !s.Live || s.Ahead != 0 || s.Holder.Exists || s.CreatedAt != first.CreatedAt || first.ID == 0 {
			t.Fatalf("first waiter of a name without a row: %+v %+v %v", first, s, err)
		}
		res, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "holder", Mode: dblock.ModeFair, TTL: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire by holder: %+v %v", res, err)
		}
		second, s, err := db.EnqueueChecked(ctx, name, "second", store.WaitExclusive, time.Minute)
		if err != nil {
			t.Fatalf("second waiter: %v", err)
		}
		check, err := db.CheckWaiter(ctx, nil, name, second.ID)
		if err != nil {
			t.Fatal(err)
		}
		s.Holder.Now, check.Holder.Now = time.Time{}, time.Time{}
		if s != check || s.Ahead != 1 || s.Holder.Owner != "holder" || s.AheadExpiresAt.IsZero() {
			t.Fatalf("second waiter's answer %+v, its check %+v", s, check)
		}
		// A semaphore's waiter queues apart from the lock's.
		_, s, err = db.EnqueueChecked(ctx, name, "permit", store.WaitSemaphore, time.Minute)
		if err != nil || s.Ahead != 0 {
			t.Fatalf("semaphore waiter: %+v %v", s, err)
		}
	})
}
