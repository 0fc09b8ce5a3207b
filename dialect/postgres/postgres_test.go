package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// TestStatementDeadline runs statements under store.DB.StatementContext of
// a context that is never cancelled, whose deadline the native path sets on
// the connection instead of having pgx watch the context: a statement
// stuck past it (a release waiting for a row another transaction locked)
// fails as under a timed-out context, and a connection that ran a
// statement under such a deadline carries none afterwards.
func TestStatementDeadline(t *testing.T) {
	iso := dbtest.New(t, store.Postgres)
	db := iso.Store()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cancellable, stop := db.StatementContext(ctx, time.Second)
	if _, _, ok := store.DeadlineOnly(cancellable); ok {
		t.Fatal("a context its caller can cancel was made deadline-only")
	}
	stop()

	t.Run("cleared", func(t *testing.T) { deadlineCleared(t, iso) })

	dbtest.ReleasePastDeadline(t, iso, "SELECT 1 FROM dblock_locks WHERE name = $1 FOR UPDATE")
}

// TestStatementCancelled: a statement under a context its caller cancels
// is carried by the socket on the native path, not pgx's watch, and ends
// as under the watch: a pg_sleep(5) cancelled 200 ms in fails with
// context.Canceled, and the checks of dbtest.ReleaseCancelled hold.
func TestStatementCancelled(t *testing.T) {
	iso := dbtest.New(t, store.Postgres)
	run := func(ctx context.Context, conn *sql.Conn, query string) error {
		return conn.Raw(func(dc any) error {
			sc, err := postgres.StdlibConn(dc)
			if err != nil {
				return err
			}
			return postgres.Bounded(ctx, sc, func(ctx context.Context, c *pgx.Conn) error {
				_, err := c.Exec(ctx, query)
				return err
			})
		})
	}
	conn, err := iso.DB.SQL().Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.AfterFunc(200*time.Millisecond, cancel)
	defer timer.Stop()
	err = run(ctx, conn, "SELECT pg_sleep(5)")
	_ = conn.Close()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("pg_sleep(5) cancelled in flight: %v, want context.Canceled", err)
	}
	selectOne := func(ctx context.Context, conn *sql.Conn) error { return run(ctx, conn, "SELECT 1") }
	dbtest.ReleaseCancelled(t, iso, "SELECT 1 FROM dblock_locks WHERE name = $1 FOR UPDATE", selectOne)
}

// deadlineCleared runs a statement under a short deadline-only context on
// one connection, then, after that deadline, one under no deadline on the
// same connection: it would fail if the deadline had stayed on it.
func deadlineCleared(t *testing.T, iso *dbtest.Isolated) {
	ctx := context.Background()
	conn, err := iso.DB.SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	selectOne := func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SELECT 1")
		return err
	}
	err = conn.Raw(func(dc any) error {
		sc, err := postgres.StdlibConn(dc)
		if err != nil {
			return err
		}
		short, stop := iso.Store().StatementContext(ctx, 50*time.Millisecond)
		defer stop()
		if _, _, ok := store.DeadlineOnly(short); !ok {
			t.Error("a never-cancelled parent did not give a deadline-only context")
		}
		if err := postgres.Bounded(short, sc, selectOne); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
		return selectOne(ctx, sc.Conn())
	})
	if err != nil {
		t.Fatalf("a statement after an earlier one's deadline passed: %v", err)
	}
}
