package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestCASAfterWait: a lease's renewal, metadata update and release that
// wait for another transaction's lock on the row (a pessimistic holder
// that took the name once the lease ran out) while the lease runs out must
// find it expired after the wait: a renewal that passed on a clock read
// before the wait would bring the lease back after another holder's
// section.
func TestCASAfterWait(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		if iso.Kind == store.SQLite {
			t.Skip("SQLite has no row lock to wait on")
		}
		db := iso.Store()
		ctx := context.Background()
		for _, op := range []string{"renew", "proclaim"} {
			name := "afterwait:" + op
			p := store.AcquireParams{Name: name, Owner: "o1", Mode: dblock.ModeOptimistic, TTL: 300 * time.Millisecond}
			res, err := db.AcquireLease(ctx, nil, p)
			if err != nil || !res.Acquired {
				t.Fatalf("acquire: %+v, %v", res, err)
			}
			holder, err := db.BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rl, err := db.LockRow(ctx, holder, name, store.RowLockParams{NoWait: true}); err != nil || !rl.Found {
				t.Fatalf("lock the row: %+v, %v", rl, err)
			}
			done := make(chan bool, 1)
			go func() {
				var ok bool
				var err error
				switch op {
				case "renew":
					ok, err = db.RenewLease(ctx, nil, name, p.Owner, res.Token, time.Minute)
				case "proclaim":
					ok, err = db.SetLeaseMetadata(ctx, nil, name, p.Owner, res.Token, "m")
				}
				if err != nil {
					t.Errorf("%s: %v", op, err)
				}
				done <- ok
			}()
			iso.WaitExpired(t, ctx, name)
			if err := holder.Commit(); err != nil {
				t.Fatal(err)
			}
			if <-done {
				t.Errorf("%s of a lease that expired while it waited passed", op)
			}
		}
	})
}
