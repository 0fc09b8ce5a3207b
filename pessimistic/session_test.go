package pessimistic_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestPostgresLockTimeoutKept: the caller's statements on Tx keep the
// session's lock_timeout, whether the lock came from the NOWAIT statement or
// after a wait.
func TestPostgresLockTimeoutKept(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	ctx := testCtx(t)
	db, err := dialect.Open(ctx, iso.DSN+"&lock_timeout=7s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	l := newLocker(t, db, nil)
	other := newLocker(t, iso.DB, nil)
	name := randName(t)
	show := func(lease *pessimistic.Lease) string {
		t.Helper()
		var v string
		if err := lease.Tx().QueryRowContext(ctx, "SHOW lock_timeout").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	lease, err := l.TryAcquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if v := show(lease); v != "7s" {
		t.Fatalf("lock_timeout after TryAcquire: %q, want the session's 7s", v)
	}
	_ = lease.Release(ctx)
	held, err := other.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *pessimistic.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, name)
		if err != nil {
			t.Errorf("acquire after a wait: %v", err)
		}
		got <- lease
	}()
	// The waiter is in the database's queue once pg_locks shows it waiting.
	for i := 0; ; i++ {
		var waiting int
		if err := iso.Store().GetContext(ctx, &waiting, "SELECT count(*) FROM pg_locks WHERE NOT granted"); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if i > 1000 {
			t.Fatal("the waiter never waited")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = held.Release(ctx)
	lease = <-got
	if lease == nil {
		return
	}
	if v := show(lease); v != "7s" {
		t.Fatalf("lock_timeout after a wait: %q, want the session's 7s", v)
	}
	_ = lease.Release(ctx)
}

// TestMariaDBIdleBoundRestored: the idle-transaction bound set for a hold
// applies during it. On a pool the caller passed to dialect.New it is gone
// from the connection afterwards; on a pool dialect.Open opened it stays
// (it only ends transactions left idle), so that the next hold with the
// same bound sends nothing to set it.
func TestMariaDBIdleBoundRestored(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	ctx := testCtx(t)
	owned := iso.Open(t)
	owned.SQL().SetMaxOpenConns(1) // Every statement below runs on the holder's connection.
	wrapped, err := dialect.New(ctx, store.Of(owned).DB.DB, dialect.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	variable := "idle_transaction_timeout"
	if !store.Of(owned).MariaDB() {
		variable = "wait_timeout"
	}
	var orig int
	if err := store.Of(owned).GetContext(ctx, &orig, "SELECT @@SESSION."+variable); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		label string
		db    *dialect.DB
		keep  bool
	}{{"caller's pool", wrapped, false}, {"pool Open opened", owned, store.Of(owned).MariaDB()}} {
		l := newLocker(t, c.db, nil)
		for _, rollback := range []bool{false, true} {
			lease, err := l.Acquire(ctx, randName(t), dblock.WithTTL(7*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var during int
			if err := lease.Tx().QueryRowContext(ctx, "SELECT @@SESSION."+variable).Scan(&during); err != nil || during != 7 {
				t.Fatalf("%s: %s during the hold: %d %v, want 7", c.label, variable, during, err)
			}
			if rollback {
				err = lease.Rollback(ctx)
			} else {
				err = lease.Release(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			want := orig
			if c.keep {
				want = 7
			}
			var after int
			if err := store.Of(owned).GetContext(ctx, &after, "SELECT @@SESSION."+variable); err != nil || after != want {
				t.Fatalf("%s: %s after the hold (rollback %v): %d %v, want %d", c.label, variable, rollback, after, err, want)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := owned.SQL().ExecContext(ctx, "SET SESSION "+variable+" = ?", orig); err != nil {
			t.Fatal(err)
		}
	}
}

// mysql8Flavour opens iso's MariaDB with the MySQL 8 dialect, so that the
// statements of the MySQL-8-only paths run against a real server. Rows must
// exist already: MySQL 8's row creation (FOR SHARE SKIP LOCKED) is not
// MariaDB syntax.
func mysql8Flavour(t *testing.T, iso *dbtest.Isolated) *dialect.DB {
	t.Helper()
	db := iso.Open(t)
	return store.Front(&store.DB{DB: store.Of(db).DB, Dialect: store.MySQLDialect(false)}).(*dialect.DB)
}

// TestMySQL8Paths runs the MySQL 8 statements (wait_timeout as the bound on
// a frozen holder, SET TRANSACTION as the open-transaction check, the
// session lock wait) on MariaDB: acquire, wait, token, and a deadlock on the
// caller's own statements.
func TestMySQL8Paths(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	if !iso.Store().MariaDB() {
		t.Skip("the server is MySQL 8: the other tests run these paths")
	}
	ctx := testCtx(t)
	l := newLocker(t, mysql8Flavour(t, iso), nil)
	other := newLocker(t, mysql8Flavour(t, iso), nil)
	name := randName(t)
	if err := iso.Store().EnsureRow(ctx, nil, name); err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, name, dblock.WithToken(), dblock.WithTTL(9*time.Second))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	var wt int
	if err := lease.Tx().QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout").Scan(&wt); err != nil || wt != 9 {
		t.Fatalf("wait_timeout during the hold: %d %v, want 9", wt, err)
	}
	if _, err := other.TryAcquire(ctx, name); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("try while held: %v", err)
	}
	if _, err := other.Acquire(ctx, name, dblock.WithWait(100*time.Millisecond)); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("bounded wait while held: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	next, err := other.Acquire(ctx, name, dblock.WithToken())
	if err != nil || next.Token() <= lease.Token() {
		t.Fatalf("next: %v, token %d after %d", err, next.Token(), lease.Token())
	}
	_ = next.Release(ctx)
	if victims, sum := userDeadlock(t, iso, mysql8Flavour(t, iso), mysql8Flavour(t, iso)); victims != 1 || sum != 2 {
		t.Fatalf("MySQL 8's statements: %d deadlock victims, sum %d; want 1 victim and a sum of 2", victims, sum)
	}
}

// TestSQLiteLockRows: on SQLite LockRows locks the database even in a
// transaction begun DEFERRED, and refuses NoWait and SkipLocked.
func TestSQLiteLockRows(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	ctx := testCtx(t)
	mustExec(t, iso, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT)")
	mustExec(t, iso, "INSERT INTO jobs (id, state) VALUES (1, 'new'), (2, 'new')")
	path := strings.TrimPrefix(iso.DSN, "sqlite://")
	raw, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	deferred, err := dialect.New(ctx, raw, dialect.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, deferred, nil)
	tx, err := deferred.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	keys, err := l.LockRows(ctx, tx, pessimistic.LockRowsParams{Table: "jobs", KeyColumn: "id", Keys: []any{2, 1}})
	if err != nil || len(keys) != 2 {
		t.Fatalf("lock rows: %v %v", keys, err)
	}
	// Another writer cannot get in while tx holds.
	other, err := iso.Store().Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	_, err = other.ExecContext(ctx, "UPDATE jobs SET state = 'taken' WHERE id = 1")
	if !errors.Is(iso.Store().Classify(err), dblock.ErrNotAcquired) {
		t.Fatalf("write while LockRows holds: %v, want busy", err)
	}
	for _, p := range []pessimistic.LockRowsParams{
		{Table: "jobs", KeyColumn: "id", Keys: []any{1}, NoWait: true},
		{Table: "jobs", KeyColumn: "id", Keys: []any{1}, SkipLocked: true},
	} {
		if _, err := l.LockRows(ctx, tx, p); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("%+v on SQLite: %v, want ErrInvalidOption", p, err)
		}
	}
}
