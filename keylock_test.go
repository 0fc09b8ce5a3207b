package dblock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestFreeNameBehindABriefKeyLock: on MySQL/MariaDB another transaction can
// hold the key range a new name's row goes into without holding the name: a
// reaper batch deleting idle neighbours, or any locking read of a missing key
// (a gap lock). A TryAcquire of that free name meets the lock, and must not
// report the name as held (it is free: "not acquired" is for names another
// owner holds); it waits for the brief lock and takes the name. Seen as 1 of
// 1,351 TryAcquire calls refused while a reaper pass deleted idle rows.
func TestFreeNameBehindABriefKeyLock(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := newModes(t, iso)
	for mode, l := range map[string]dblock.Locker{"optimistic": m.opt, "fair": m.fair} {
		name := locktest.RandomName("gap")
		tx, err := iso.Store().DB.DB.BeginTx(ctx, nil) // REPEATABLE READ: the read locks the gap.
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.QueryContext(ctx, "SELECT name FROM dblock_locks WHERE name = ? FOR UPDATE", name)
		if err != nil {
			t.Fatal(err)
		}
		_ = rows.Close()
		time.AfterFunc(50*time.Millisecond, func() { _ = tx.Rollback() })
		lease, err := l.TryAcquire(ctx, name)
		if err != nil {
			t.Fatalf("%s: TryAcquire of a free name behind a brief gap lock: %v", mode, err)
		}
		_ = lease.Release(ctx)
	}
}
