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
// acquisition, renewal and release run prepared once the schema is there;
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
	if n := store.PreparedCount(db); n != 3 {
		t.Fatalf("%d statements prepared after acquisitions, renewals and releases, want 3", n)
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
