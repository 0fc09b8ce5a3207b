package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestIssueTokenFlushed: on PostgreSQL a token is durable when IssueToken
// returns: its commit flushed the WAL past every record written before the
// call (nextval alone writes WAL once per 32 values, and a transaction that
// wrote none commits without a flush).
func TestIssueTokenFlushed(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	ctx := context.Background()
	conn, err := iso.Store().Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var last int64
	for i := 0; i < 40; i++ { // More than the 32 values one sequence record covers.
		var before string
		if err := conn.GetContext(ctx, &before, "SELECT pg_current_wal_insert_lsn()::text"); err != nil {
			t.Fatal(err)
		}
		tok, err := iso.Store().IssueToken(ctx, conn, "n")
		if err != nil {
			t.Fatalf("issue: %v", err)
		}
		if int64(tok) <= last {
			t.Fatalf("token %d after %d", tok, last)
		}
		last = int64(tok)
		var flushed bool
		if err := conn.GetContext(ctx, &flushed, "SELECT pg_current_wal_flush_lsn() > $1::pg_lsn", before); err != nil {
			t.Fatal(err)
		}
		if !flushed {
			t.Fatalf("token %d returned before the WAL was flushed past %s", tok, before)
		}
	}
}

// TestEndHold: on MySQL/MariaDB EndHold reports a transaction the server
// ended (here: committed implicitly by DDL) and restores the session bound
// SetHoldBound changed; the MySQL 8 statements are run on MariaDB too.
func TestEndHold(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	ctx := context.Background()
	for _, flavour := range []store.Dialect{store.MySQLDialect(true), store.MySQLDialect(false)} {
		db := &store.DB{DB: store.Of(iso.Open(t)).DB, Dialect: flavour}
		variable := "idle_transaction_timeout"
		if flavour != store.MySQLDialect(true) {
			variable = "wait_timeout"
		}
		conn, err := db.Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var orig int
		if err := conn.GetContext(ctx, &orig, "SELECT @@SESSION."+variable); err != nil {
			t.Fatal(err)
		}
		for _, ddl := range []bool{false, true} {
			tx, err := conn.BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.SetHoldBound(ctx, tx, 1500*time.Millisecond, 0); err != nil {
				t.Fatalf("%s: set bound: %v", variable, err)
			}
			var during int
			if err := tx.GetContext(ctx, &during, "SELECT @@SESSION."+variable); err != nil || during != 2 {
				t.Fatalf("%s during the hold: %d %v, want 2", variable, during, err)
			}
			if ddl {
				if _, err := tx.ExecContext(ctx, "CREATE TABLE p_implicit (id INT)"); err != nil {
					t.Fatal(err)
				}
			}
			open, err := db.EndHold(ctx, tx, true)
			if err != nil || open == ddl {
				t.Fatalf("%s, ddl %v: end hold: open %v, %v", variable, ddl, open, err)
			}
			_ = tx.Rollback()
			if !ddl {
				var after int
				if err := conn.GetContext(ctx, &after, "SELECT @@SESSION."+variable); err != nil || after != orig {
					t.Fatalf("%s after the hold: %d %v, want %d", variable, after, err, orig)
				}
			}
			if _, err := conn.ExecContext(ctx, "DROP TABLE IF EXISTS p_implicit"); err != nil {
				t.Fatal(err)
			}
		}
		_ = conn.Close()
	}
}

// TestHoldBoundSticky: on a MariaDB pool that Open opened, the hold bound
// stays on the session, the lock statement reports it, and a hold with the
// same bound sends nothing to set it (a cancelled context would fail any
// statement); EndHold still tells an open transaction from one the server
// ended.
func TestHoldBoundSticky(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	db := iso.Open(t)
	if !store.Of(db).MariaDB() {
		t.Skip("the bound stays on the session on MariaDB only; MySQL 8 restores it")
	}
	ctx := context.Background()
	conn, err := store.Of(db).Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := store.Of(db).EnsureRow(ctx, nil, "sticky"); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for i, ddl := range []bool{false, false, true} {
		tx, err := conn.BeginTxx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		rl, err := store.Of(db).LockRow(ctx, tx, "sticky", store.RowLockParams{NoWait: true})
		if err != nil || !rl.Found {
			t.Fatalf("lock: %+v %v", rl, err)
		}
		if i > 0 && rl.Session.Bound != 2 {
			t.Fatalf("hold %d: the lock statement saw bound %d, want 2 (kept from the hold before)", i, rl.Session.Bound)
		}
		setCtx := ctx
		if i > 0 {
			setCtx = cancelled // Nothing may be sent.
		}
		if err := store.Of(db).SetHoldBound(setCtx, tx, 1500*time.Millisecond, rl.Session.Bound); err != nil {
			t.Fatalf("hold %d: set bound: %v", i, err)
		}
		if ddl {
			if _, err := tx.ExecContext(ctx, "CREATE TABLE p_sticky (id INT)"); err != nil {
				t.Fatal(err)
			}
		}
		open, err := store.Of(db).EndHold(ctx, tx, true)
		if err != nil || open == ddl {
			t.Fatalf("hold %d, ddl %v: end hold: open %v, %v", i, ddl, open, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var after int
	if err := conn.GetContext(ctx, &after, "SELECT @@SESSION.idle_transaction_timeout"); err != nil || after != 2 {
		t.Fatalf("bound after the holds: %d %v, want 2 (kept)", after, err)
	}
}
