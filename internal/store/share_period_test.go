package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestSharePeriodOverExpiredHolder: a reader that begins a period on a
// name whose exclusive lease expired leaves nothing of that holder in the
// row. The next writer's token exceeds the period's, and the reader after
// that writer's release begins a period of its own with a greater token
// again: it never joins the writer's token as if the writer had
// downgraded.
func TestSharePeriodOverExpiredHolder(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.Store()
		ctx := context.Background()
		name := "share:over-expired"
		write := func(owner string, ttl time.Duration) dblock.Token {
			t.Helper()
			res, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
			if err != nil || !res.Acquired {
				t.Fatalf("write %s: %+v, %v", owner, res, err)
			}
			return res.Token
		}
		read := func(owner string) dblock.Token {
			t.Helper()
			res, err := db.AcquireShare(ctx, store.ShareParams{Name: name, Owner: owner, TTL: 30 * time.Second})
			if err != nil || !res.Acquired {
				t.Fatalf("read %s: %+v, %v", owner, res, err)
			}
			return res.Token
		}
		w1 := write("w1", 200*time.Millisecond)
		time.Sleep(400 * time.Millisecond) // w1's lease expires unreleased.
		r1 := read("r1")
		if r1 <= w1 {
			t.Fatalf("period over the expired writer: token %d, writer's %d", r1, w1)
		}
		if ok, err := db.ReleaseShare(ctx, name, "r1", r1); err != nil || !ok {
			t.Fatalf("release r1: %v, %v", ok, err)
		}
		w2 := write("w2", 30*time.Second)
		if w2 <= r1 {
			t.Fatalf("writer after the period: token %d, period's %d", w2, r1)
		}
		if ok, err := db.ReleaseLease(ctx, nil, name, "w2", w2); err != nil || !ok {
			t.Fatalf("release w2: %v, %v", ok, err)
		}
		if r2 := read("r2"); r2 <= w2 {
			t.Fatalf("reader after the writer's release: token %d, writer's %d (joined a period the writer never began)", r2, w2)
		}
	})
}
