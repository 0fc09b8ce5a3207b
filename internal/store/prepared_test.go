package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

// TestPreparedStatements: on a MySQL/MariaDB pool Open opened, a lease's
// acquisition and release run prepared once the schema is there;
// before it, a statement that cannot be prepared runs as text and fails as
// text would (the schema missing); a pool the caller keeps gets no
// prepared statements; Close closes them.
func TestPreparedStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	iso := dbtest.NewEmpty(t, store.MySQL)
	db := iso.Store()
	p := store.AcquireParams{Name: "prepared", Owner: "o1", Mode: dblock.ModeOptimistic, TTL: time.Minute}
	if _, err := db.AcquireLease(ctx, nil, p); !errors.Is(err, dblock.ErrSchemaMissing) {
		t.Fatalf("acquire before the migrations: %v, want ErrSchemaMissing", err)
	}
	if n := store.PreparedCount(db); n != 0 {
		t.Fatalf("%d statements prepared on a database without the schema", n)
	}
	if err := migrations.Up(ctx, iso.DB); err != nil {
		t.Fatal(err)
	}
	store.PrepareAgain(db)
	leasePairs(t, db, p)
	// The acquire and the release; on MariaDB also the take of a name
	// released lately (the second and third acquisitions). A renewal runs
	// in a transaction of its own.
	want := 2
	if db.Dialect.Lease().TakeFree != "" {
		want = 3
	}
	if n := store.PreparedCount(db); n != want {
		t.Fatalf("%d statements prepared after acquisitions, renewals and releases, want %d", n, want)
	}

	raw, err := store.New(ctx, db.DB.DB, store.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	leasePairs(t, raw, p)
	if n := store.PreparedCount(raw); n != 0 {
		t.Fatalf("%d statements prepared on a pool the caller keeps", n)
	}

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := store.PreparedCount(db); n != 0 {
		t.Fatalf("%d statements still prepared after Close", n)
	}
}

// leasePairs acquires, renews and releases p's lease a few times on db.
func leasePairs(t *testing.T, db *store.DB, p store.AcquireParams) {
	t.Helper()
	ctx := context.Background()
	for range 3 {
		res, err := db.AcquireLease(ctx, nil, p)
		if err != nil || !res.Acquired {
			t.Fatalf("acquire: %+v, %v", res, err)
		}
		if ok, err := db.RenewLease(ctx, nil, p.Name, p.Owner, res.Token, time.Minute); err != nil || !ok {
			t.Fatalf("renew: %v, %v", ok, err)
		}
		if ok, err := db.ReleaseLease(ctx, nil, p.Name, p.Owner, res.Token); err != nil || !ok {
			t.Fatalf("release: %v, %v", ok, err)
		}
	}
}

// TestPreparedInTx: on a MySQL/MariaDB pool Open opened, a pessimistic
// hold's NOWAIT lock statement runs inside its transaction, prepared once
// on each connection. Its first use runs it as text and prepares it in the
// background, never waiting for a second connection of the pool while the
// transaction holds one (here the pool has only one); the prepared form
// reads what the text did; Close waits for no preparation stuck on the
// pool.
func TestPreparedInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	iso := dbtest.New(t, store.MySQL)
	db := iso.Store()
	db.SetMaxOpenConns(1)
	name := "prepared:" + t.Name()
	// A lease on the row, so that the lock statement reads a holder.
	p := store.AcquireParams{Name: name, Owner: "o1", Mode: dblock.ModeOptimistic, TTL: time.Hour}
	if res, err := db.AcquireLease(ctx, nil, p); err != nil || !res.Acquired {
		t.Fatalf("acquire: %+v, %v", res, err)
	}
	lock := func() store.RowLock {
		t.Helper()
		tx, err := db.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		rl, err := db.LockRow(ctx, tx, name, store.RowLockParams{NoWait: true})
		if err != nil || !rl.Found {
			t.Fatalf("lock: %+v, %v", rl, err)
		}
		return rl
	}
	first := lock() // As text; the preparation waits for the connection.
	deadline := time.Now().Add(time.Minute)
	for store.PreparedCount(db) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lock statement was never prepared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	second := lock() // Prepared.
	first.Holder.Now, second.Holder.Now = time.Time{}, time.Time{}
	first.Session.At, second.Session.At = time.Time{}, time.Time{}
	if first != second || first.Holder.Owner != p.Owner || first.Holder.ExpiresAt.IsZero() {
		t.Fatalf("prepared lock read %+v, text read %+v", second, first)
	}

	// A preparation waiting for the pool's only connection, which a
	// transaction holds, does not hold up Close.
	other, err := store.Open(ctx, iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	other.SetMaxOpenConns(1)
	tx, err := other.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := other.LockRow(ctx, tx, name, store.RowLockParams{NoWait: true}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- other.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close waited for a preparation stuck on the pool")
	}
}
