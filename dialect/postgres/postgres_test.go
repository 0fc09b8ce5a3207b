package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/dialect/postgres"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
)

// TestFromPool locks through a *pgxpool.Pool the test keeps: the handle
// says PostgreSQL, its locks exclude a handle opened from a DSN, and its
// Close leaves the pool open.
func TestFromPool(t *testing.T) {
	iso := dbtest.New(t, store.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	db, err := postgres.FromPool(ctx, pool)
	if err != nil {
		t.Fatalf("FromPool: %v", err)
	}
	if db.Kind() != dialect.Postgres {
		t.Errorf("Kind = %q, want postgres", db.Kind())
	}
	locker, err := optimistic.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := locker.TryAcquire(ctx, "from-pool")
	if err != nil {
		t.Fatalf("TryAcquire through the pool: %v", err)
	}
	other, err := optimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.TryAcquire(ctx, "from-pool"); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Errorf("second holder through a DSN pool: %v, want ErrNotAcquired", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := locker.Close(); err != nil {
		t.Fatal(err)
	}
	var one int
	if err := db.SQL().QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SQL() before Close: %d, %v", one, err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Errorf("the pool after the handle's Close: %v, want it open", err)
	}
	if _, err := postgres.FromPool(ctx, nil); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("FromPool(nil) = %v, want ErrInvalidOption", err)
	}
}
