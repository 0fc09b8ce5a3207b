package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

func TestListLocksAndWaiters(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		db := iso.DB
		acquire := func(name, owner string) dblock.Token {
			t.Helper()
			r, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: time.Minute, Metadata: "m-" + name})
			if err != nil || !r.Acquired {
				t.Fatalf("acquire %s: %+v %v", name, r, err)
			}
			return r.Token
		}
		tokB := acquire("b", "ob")
		tokA := acquire("a", "oa")
		acquire("c", "oc")
		if ok, err := store.Of(db).ReleaseLease(ctx, nil, "c", "oc", acquire("c", "oc")); err != nil || !ok {
			t.Fatalf("release reentry of c: %v %v", ok, err)
		}
		// c is held twice, released once: still held with reentry 1. Free d entirely.
		tokD := acquire("d", "od")
		if ok, err := store.Of(db).ReleaseLease(ctx, nil, "d", "od", tokD); err != nil || !ok {
			t.Fatalf("release d: %v %v", ok, err)
		}

		locks, err := store.Of(db).ListLocks(ctx, nil)
		if err != nil {
			t.Fatalf("ListLocks: %v", err)
		}
		if len(locks) != 3 || locks[0].Name != "a" || locks[1].Name != "b" || locks[2].Name != "c" {
			t.Fatalf("ListLocks = %+v, want a, b, c (d is free)", locks)
		}
		a := locks[0]
		if a.Owner != "oa" || a.Token != int64(tokA) || a.Reentry != 1 || a.Mode != dblock.ModeOptimistic || a.Metadata != "m-a" {
			t.Errorf("lock a = %+v", a)
		}
		if a.AcquiredAt.IsZero() || a.UpdatedAt.IsZero() || a.Now.IsZero() || a.Expired() {
			t.Errorf("lock a times = %+v", a)
		}
		if d := a.ExpiresAt.Sub(a.Now); d <= 0 || d > time.Minute {
			t.Errorf("lock a expires in %v, want (0, 1m]", d)
		}
		if a.Now.Location() != time.UTC || a.ExpiresAt.Location() != time.UTC {
			t.Errorf("times not UTC: %v %v", a.Now, a.ExpiresAt)
		}
		if locks[1].Token != int64(tokB) {
			t.Errorf("lock b token %d, want %d", locks[1].Token, tokB)
		}
		if locks[2].Reentry != 1 {
			t.Errorf("lock c reentry %d, want 1", locks[2].Reentry)
		}

		only, err := store.Of(db).ListLocks(ctx, []string{"b", "d", "missing"})
		if err != nil {
			t.Fatalf("ListLocks(b, d, missing): %v", err)
		}
		if len(only) != 1 || only[0].Name != "b" {
			t.Fatalf("ListLocks(b, d, missing) = %+v, want only b", only)
		}

		dbtest.AddWaiter(t, db, "q", "w1", time.Minute)
		dbtest.AddWaiter(t, db, "q", "stale", -time.Second)
		dbtest.AddWaiter(t, db, "q", "w2", time.Minute)
		dbtest.AddWaiter(t, db, "r", "w3", time.Minute)
		waiters, err := store.Of(db).ListWaiters(ctx, nil)
		if err != nil {
			t.Fatalf("ListWaiters: %v", err)
		}
		if len(waiters) != 3 {
			t.Fatalf("ListWaiters = %+v, want 3 live waiters", waiters)
		}
		want := []struct {
			name, owner string
			pos         int
		}{{"q", "w1", 1}, {"q", "w2", 2}, {"r", "w3", 1}}
		for i, w := range want {
			got := waiters[i]
			if got.Name != w.name || got.Owner != w.owner || got.Position != w.pos {
				t.Errorf("waiter %d = %+v, want %s/%s at %d", i, got, w.name, w.owner, w.pos)
			}
			if got.ID <= 0 || got.CreatedAt.IsZero() || !got.ExpiresAt.After(got.Now) || got.Now.Sub(got.CreatedAt) < 0 {
				t.Errorf("waiter %d fields = %+v", i, got)
			}
		}
		onlyR, err := store.Of(db).ListWaiters(ctx, []string{"r"})
		if err != nil {
			t.Fatalf("ListWaiters(r): %v", err)
		}
		if len(onlyR) != 1 || onlyR[0].Owner != "w3" || onlyR[0].Position != 1 {
			t.Fatalf("ListWaiters(r) = %+v", onlyR)
		}
	})
}

// TestRowLocksExclusive: the test servers are single nodes, where a row
// lock excludes every client (on MariaDB: wsrep_on is off).
func TestRowLocksExclusive(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ok, err := iso.Store().RowLocksExclusive(context.Background())
		if err != nil || !ok {
			t.Fatalf("RowLocksExclusive on a single %s server = %v, %v; want true", iso.Kind, ok, err)
		}
	})
}
