package fairqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestWaitBoundedBehindPessimisticHolder: a fair Acquire behind a
// pessimistic holder returns when its wait (WithWait, or ctx's deadline)
// ends, whatever the database. On SQLite the holder owns the database's one
// write lock, and the waiter's statements used to wait out the pool's busy
// timeout (bounded by Config.ReleaseTimeout) instead; here both are 30 s and
// the holder lets go only after the waiter has returned (or after 20 s,
// failing the test), so a waiter that depends on either never returns in
// time.
func TestWaitBoundedBehindPessimisticHolder(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		db := iso.DB
		if iso.Kind == store.SQLite {
			var err error
			if db, err = dialect.Open(ctx, iso.DSN+"?_pragma=busy_timeout(30000)"); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
		}
		// Long bounds everywhere but in the wait itself: the pool's busy
		// timeout (above) and the take's and the release's statements.
		cfg := testConfig(t)
		cfg.ReleaseTimeout = 30 * time.Second
		fair := newFair(t, db, cfg)
		t.Cleanup(func() { _ = fair.Close() })
		pess, err := pessimistic.New(iso.DB, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer pess.Close()
		for _, bound := range []string{"WithWait", "ctx deadline"} {
			name := locktest.RandomName("bounded")
			// Acquire, not TryAcquire: the name is free, and a try bounds
			// its wait for a connection (TryConnWait), which a loaded
			// machine dialling PostgreSQL once exceeded here.
			holder, err := pess.Acquire(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			returned := make(chan error, 1)
			go func() {
				if bound == "WithWait" {
					_, err := fair.Acquire(ctx, name, dblock.WithWait(300*time.Millisecond))
					returned <- err
					return
				}
				wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer wcancel()
				_, err := fair.Acquire(wctx, name)
				returned <- err
			}()
			select {
			case err = <-returned:
			case <-time.After(20 * time.Second):
				_ = holder.Release(ctx)
				t.Fatalf("%s: the fair waiter did not return while the pessimistic holder held", bound)
			}
			_ = holder.Release(ctx)
			if !errors.Is(err, dblock.ErrNotAcquired) {
				t.Fatalf("%s: %v, want ErrNotAcquired", bound, err)
			}
		}
	})
}

// TestWaitBoundedBehindOwnWrites: on SQLite a Locker serialises its own
// writes; while its lease keeper's release waits behind a pessimistic holder
// (here for the pool's 30 s busy timeout), a TryAcquire and a bounded
// Acquire of other names through the same Locker still return at once and
// at their wait's end, instead of waiting for the keeper.
func TestWaitBoundedBehindOwnWrites(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := dialect.Open(ctx, iso.DSN+"?_pragma=busy_timeout(30000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := testConfig(t)
	cfg.ReleaseTimeout = 30 * time.Second
	fair := newFair(t, db, cfg)
	t.Cleanup(func() { _ = fair.Close() })
	pess, err := pessimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pess.Close()

	lease, err := fair.TryAcquire(ctx, locktest.RandomName("own"))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := pess.TryAcquire(ctx, locktest.RandomName("pess"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = lease.Release(ctx) }() // Waits for the database, holding the Locker's writes.
	time.Sleep(50 * time.Millisecond)
	returned := make(chan error, 2)
	go func() {
		_, err := fair.TryAcquire(ctx, locktest.RandomName("try"))
		returned <- err
	}()
	go func() {
		_, err := fair.Acquire(ctx, locktest.RandomName("wait"), dblock.WithWait(300*time.Millisecond))
		returned <- err
	}()
	for range 2 {
		select {
		case err := <-returned:
			if !errors.Is(err, dblock.ErrNotAcquired) {
				t.Errorf("behind the Locker's own blocked write: %v, want ErrNotAcquired", err)
			}
		case <-time.After(20 * time.Second):
			_ = holder.Release(ctx)
			t.Fatal("a fair call waited for the Locker's own blocked write")
		}
	}
	_ = holder.Release(ctx)
}
