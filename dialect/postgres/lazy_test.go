package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect/postgres"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// lazyFixture is one pinned connection of a pool dialect.Open opened, and
// the server's view of its session from another connection.
type lazyFixture struct {
	t   *testing.T
	ctx context.Context
	db  *store.DB
	pid int64
	*sqlx.Conn
}

func newLazyFixture(t *testing.T) *lazyFixture {
	iso := dbtest.New(t, store.Postgres)
	if !iso.Store().DefersBegin() {
		t.Fatal("a pool dialect.Open opened does not defer BEGIN")
	}
	return newLazyFixtureOn(t, iso.Store())
}

func newLazyFixtureOn(t *testing.T, db *store.DB) *lazyFixture {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	conn, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f := &lazyFixture{t: t, ctx: ctx, db: db, Conn: conn}
	if err := conn.QueryRowxContext(ctx, "SELECT pg_backend_pid()").Scan(&f.pid); err != nil {
		t.Fatal(err)
	}
	if err := db.EnsureRow(ctx, nil, "lazy"); err != nil {
		t.Fatal(err)
	}
	return f
}

// inTx reports whether the pinned session has a transaction open, as the
// server sees it from another connection.
func (f *lazyFixture) inTx() bool {
	f.t.Helper()
	var open bool
	err := f.db.QueryRowxContext(f.ctx,
		"SELECT xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = $1", f.pid).Scan(&open)
	if err != nil {
		f.t.Fatal(err)
	}
	return open
}

// lockedElsewhere reports whether the row of name is locked, tried from
// another connection.
func (f *lazyFixture) lockedElsewhere() bool {
	f.t.Helper()
	tx, err := f.db.BeginTxx(f.ctx, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	_, err = f.db.LockRow(f.ctx, tx, "lazy", store.RowLockParams{NoWait: true})
	if err != nil && !errors.Is(err, dblock.ErrNotAcquired) {
		f.t.Fatal(err)
	}
	return err != nil
}

func (f *lazyFixture) begin() *sqlx.Tx {
	f.t.Helper()
	tx, err := f.BeginTxx(store.WithDeferredBegin(f.ctx), nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = tx.Rollback() }) // After a failure: the connection's Close waits for it.
	return tx
}

// TestDeferredBegin: a transaction begun for a pessimistic hold sends
// nothing until its first statement, which then runs inside it, whether it
// goes through pgx (with the BEGIN in its round trip) or through
// database/sql; one that ends before any statement ends nothing.
func TestDeferredBegin(t *testing.T) {
	t.Run("lock statement carries BEGIN", func(t *testing.T) {
		f := newLazyFixture(t)
		tx := f.begin()
		if f.inTx() {
			t.Fatal("a transaction is open on the server before its first statement")
		}
		if _, err := f.db.LockRow(f.ctx, tx, "lazy", store.RowLockParams{NoWait: true, Conn: f.Conn.Conn}); err != nil {
			t.Fatal(err)
		}
		if !f.inTx() || !f.lockedElsewhere() {
			t.Fatal("the first statement did not run in an open transaction holding the row")
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if f.inTx() || f.lockedElsewhere() {
			t.Fatal("the commit left the transaction or the row lock")
		}
	})
	t.Run("database/sql statement first", func(t *testing.T) {
		f := newLazyFixture(t)
		tx := f.begin()
		if _, err := tx.ExecContext(f.ctx, "UPDATE dblock_locks SET metadata = 'in tx' WHERE name = 'lazy'"); err != nil {
			t.Fatal(err)
		}
		if !f.inTx() {
			t.Fatal("no transaction open after its first statement")
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		var md *string
		if err := f.db.QueryRowxContext(f.ctx, "SELECT metadata FROM dblock_locks WHERE name = 'lazy'").Scan(&md); err != nil {
			t.Fatal(err)
		}
		if md != nil {
			t.Fatalf("the rolled-back update stayed: metadata %q", *md)
		}
	})
	t.Run("no statement", func(t *testing.T) {
		f := newLazyFixture(t)
		if err := f.begin().Commit(); err != nil {
			t.Fatal(err)
		}
		if err := f.begin().Rollback(); err != nil {
			t.Fatal(err)
		}
		var one int
		if err := f.QueryRowxContext(f.ctx, "SELECT 1").Scan(&one); err != nil || f.inTx() {
			t.Fatalf("the connection after empty transactions: %v, in a transaction: %v", err, f.inTx())
		}
	})
	t.Run("failed first statement", func(t *testing.T) {
		f := newLazyFixture(t)
		other, err := f.db.BeginTxx(f.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = other.Rollback() }()
		if _, err := f.db.LockRow(f.ctx, other, "lazy", store.RowLockParams{NoWait: true}); err != nil {
			t.Fatal(err)
		}
		tx := f.begin()
		_, err = f.db.LockRow(f.ctx, tx, "lazy", store.RowLockParams{NoWait: true, Conn: f.Conn.Conn})
		if !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("NOWAIT on a locked row: %v, want ErrNotAcquired", err)
		}
		if err := tx.Commit(); !store.CommitRolledBack(err) {
			t.Fatalf("commit of the aborted transaction: %v, want the rollback reported", err)
		}
		if f.inTx() {
			t.Fatal("a transaction stayed open")
		}
	})
	t.Run("connection closed before the first statement", func(t *testing.T) {
		// pgx refuses a closed connection before sending anything; the
		// error must come back through database/sql's Raw, which would
		// wait forever for the open transaction if it were
		// driver.ErrBadConn.
		f := newLazyFixture(t)
		tx := f.begin()
		err := f.Raw(func(dc any) error { return postgres.CloseUnder(f.ctx, dc) })
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := f.db.LockRow(f.ctx, tx, "lazy", store.RowLockParams{NoWait: true, Conn: f.Conn.Conn})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a lock statement on a closed connection succeeded")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a lock statement on a closed connection did not return")
		}
		if err := tx.Rollback(); err != nil {
			t.Fatalf("rollback of a transaction that never began: %v", err)
		}
	})
}

// TestDeferredBeginFromPool: a handle over the caller's *pgxpool.Pool
// defers a hold's BEGIN too.
func TestDeferredBeginFromPool(t *testing.T) {
	iso := dbtest.New(t, store.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // After the fixture's connection is back (cleanups run last first).
	h, err := postgres.FromPool(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	db := store.Of(h)
	if !db.DefersBegin() {
		t.Fatal("a handle over a pgxpool.Pool does not defer BEGIN")
	}
	f := newLazyFixtureOn(t, db)
	tx := f.begin()
	if f.inTx() {
		t.Fatal("a transaction is open on the server before its first statement")
	}
	if _, err := db.LockRow(f.ctx, tx, "lazy", store.RowLockParams{NoWait: true, Conn: f.Conn.Conn}); err != nil {
		t.Fatal(err)
	}
	if !f.inTx() || !f.lockedElsewhere() {
		t.Fatal("the first statement did not run in an open transaction holding the row")
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestRawConn: a Raw caller on a pool dialect.Open opened reaches pgx's
// connection through the method Conn, as the package doc says.
func TestRawConn(t *testing.T) {
	f := newLazyFixture(t)
	err := f.Raw(func(dc any) error {
		c, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			t.Fatalf("the driver connection %T has no Conn() *pgx.Conn", dc)
		}
		var one int
		return c.Conn().QueryRow(f.ctx, "SELECT 1").Scan(&one)
	})
	if err != nil {
		t.Fatal(err)
	}
}
