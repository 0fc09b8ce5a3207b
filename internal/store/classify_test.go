package store_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// These tests provoke real errors on real servers and check their classification.

func setupRows(t *testing.T, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		r, err := db.AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "setup", Mode: dblock.ModeOptimistic, TTL: time.Minute})
		if err != nil || !r.Acquired {
			t.Fatalf("seed %s: %+v %v", name, r, err)
		}
		if ok, err := db.ReleaseLease(ctx, nil, name, "setup", r.Token); err != nil || !ok {
			t.Fatalf("free %s: %v %v", name, ok, err)
		}
	}
}

func forUpdate(db *store.DB) string {
	if db.Dialect.Kind() == store.Postgres {
		return "SELECT name FROM dblock_locks WHERE name = $1 FOR UPDATE"
	}
	return "SELECT name FROM dblock_locks WHERE name = ? FOR UPDATE"
}

func lockRow(ctx context.Context, t *testing.T, tx *sqlx.Tx, db *store.DB, name string) error {
	t.Helper()
	var got string
	return tx.QueryRowxContext(ctx, forUpdate(db), name).Scan(&got)
}

func TestClassifyLockTimeout(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t, kind).DB
			setupRows(t, store.Of(db))
			holder, err := store.Of(db).BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Rollback() }()
			if err := lockRow(ctx, t, holder, store.Of(db), "a"); err != nil {
				t.Fatal(err)
			}
			waiter, err := store.Of(db).BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = waiter.Rollback() }()
			if kind == store.Postgres {
				if _, err := waiter.ExecContext(ctx, "SET LOCAL lock_timeout = '100ms'"); err != nil {
					t.Fatal(err)
				}
			} // MySQL: store.Open sets innodb_lock_wait_timeout=1 for the session.
			err = store.Of(db).Classify(lockRow(ctx, t, waiter, store.Of(db), "a"))
			if !errors.Is(err, dblock.ErrNotAcquired) || !store.IsRetryable(err) {
				t.Fatalf("lock timeout classified as %v", err)
			}
		})
	}
}

func TestClassifyNoWaitAcquire(t *testing.T) {
	t.Parallel()
	// A lease acquire on a row held FOR UPDATE returns at once, not acquired,
	// naming a pessimistic holder (PostgreSQL NOWAIT, MariaDB SET STATEMENT).
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := dbtest.New(t, kind).DB
			setupRows(t, store.Of(db))
			holder, err := store.Of(db).BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Rollback() }()
			if err := lockRow(ctx, t, holder, store.Of(db), "a"); err != nil {
				t.Fatal(err)
			}
			r, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: "a", Owner: "o", Mode: dblock.ModeOptimistic, TTL: time.Minute})
			if err != nil {
				t.Fatalf("acquire behind FOR UPDATE: %v", err)
			}
			if r.Acquired || r.Holder.Mode != dblock.ModePessimistic {
				t.Fatalf("acquire behind FOR UPDATE: %+v", r)
			}
		})
	}
}

func TestClassifyDeadlock(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			iso := dbtest.New(t, kind)
			db := iso.DB
			setupRows(t, store.Of(db))
			if kind == store.MySQL {
				// A pool whose lock waits outlast deadlock detection.
				db = iso.Open(t)
			}
			tx1, err := store.Of(db).BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx1.Rollback() }()
			tx2, err := store.Of(db).BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx2.Rollback() }()
			if kind == store.MySQL {
				for _, tx := range []*sqlx.Tx{tx1, tx2} {
					if _, err := tx.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 20"); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := lockRow(ctx, t, tx1, store.Of(db), "a"); err != nil {
				t.Fatal(err)
			}
			if err := lockRow(ctx, t, tx2, store.Of(db), "b"); err != nil {
				t.Fatal(err)
			}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); errs[0] = store.Of(db).Classify(lockRow(ctx, t, tx1, store.Of(db), "b")) }()
			go func() { defer wg.Done(); errs[1] = store.Of(db).Classify(lockRow(ctx, t, tx2, store.Of(db), "a")) }()
			// The victim's rollback lets the other proceed; roll back both once one fails.
			wg.Wait()
			victims := 0
			for _, err := range errs {
				if errors.Is(err, dblock.ErrDeadlock) {
					victims++
					if !store.IsRetryable(err) {
						t.Errorf("deadlock not retryable: %v", err)
					}
				} else if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
			}
			if victims != 1 {
				t.Fatalf("want exactly one deadlock victim, got %v", errs)
			}
		})
	}
}

func TestClassifySerialization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t, store.Postgres).DB
	setupRows(t, store.Of(db))
	opts := func() *sqlx.Tx {
		tx, err := store.Of(db).BeginTxx(ctx, &sqlTxSerializable)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		return tx
	}
	tx1, tx2 := opts(), opts()
	var n int
	for _, tx := range []*sqlx.Tx{tx1, tx2} {
		if err := tx.GetContext(ctx, &n, "SELECT count(*) FROM dblock_locks WHERE reentry = 0"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx1.ExecContext(ctx, "UPDATE dblock_locks SET reentry = 0, metadata = 'x' WHERE name = 'a'"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx2.ExecContext(ctx, "UPDATE dblock_locks SET reentry = 0, metadata = 'y' WHERE name = 'b'"); err != nil {
		t.Fatal(err)
	}
	err1 := store.Of(db).Classify(tx1.Commit())
	err2 := store.Of(db).Classify(tx2.Commit())
	if err1 != nil || !errors.Is(err2, dblock.ErrSerialization) || !store.IsRetryable(err2) {
		t.Fatalf("serializable write skew: commit1=%v commit2=%v, want nil and ErrSerialization", err1, err2)
	}
}

func TestClassifySQLiteBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	iso := dbtest.New(t, store.SQLite)
	iso.DSN += "?_pragma=busy_timeout(50)"
	db1, db2 := iso.Open(t), iso.Open(t)
	tx, err := store.Of(db1).BeginTxx(ctx, nil) // BEGIN IMMEDIATE: takes the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	_, err = store.Of(db2).AcquireLease(ctx, nil, store.AcquireParams{Name: "a", Owner: "o", Mode: dblock.ModeOptimistic, TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire while another writer holds the database: %v", err)
	}
	_, err = db2.SQL().ExecContext(ctx, "UPDATE dblock_locks SET metadata = 'x'")
	if err = store.Of(db2).Classify(err); !errors.Is(err, dblock.ErrNotAcquired) {
		t.Fatalf("busy write classified as %v", err)
	}
}

// TestClassifySQLiteWriteConflict provokes SQLite's nearest thing to a
// deadlock: two deferred transactions both read, then both write. In WAL
// mode (dblock's default) the first writer proceeds; once it commits, the
// second, whose snapshot is now stale, fails with SQLITE_BUSY_SNAPSHOT at
// once: a serialization failure, to be retried from the start. With a
// rollback journal SQLite breaks the cycle by failing the second writer with
// a plain SQLITE_BUSY at once (not acquired, retryable). SQLite has no
// deadlock error to classify (see the dialect's Classify).
func TestClassifySQLiteWriteConflict(t *testing.T) {
	t.Parallel()
	for _, journal := range []string{"WAL", "DELETE"} {
		t.Run(journal, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			iso := dbtest.New(t, store.SQLite)
			setupRows(t, iso.Store())
			// Deferred transactions (dblock's own begin IMMEDIATE); a busy
			// timeout long enough that a plain wait would not end the test.
			iso.DSN += "?_txlock=deferred&_pragma=busy_timeout(10000)&_pragma=journal_mode(" + journal + ")"
			// Leaving WAL needs the file to itself.
			if err := iso.DB.Close(); err != nil {
				t.Fatal(err)
			}
			db1, db2 := iso.Open(t), iso.Open(t)
			var mode string
			if err := store.Of(db2).GetContext(ctx, &mode, "PRAGMA journal_mode"); err != nil || !strings.EqualFold(mode, journal) {
				t.Fatalf("journal mode %q, %v; want %s", mode, err, journal)
			}
			begin := func(db *store.DB) *sqlx.Tx {
				tx, err := db.BeginTxx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = tx.Rollback() })
				var n int
				if err := tx.GetContext(ctx, &n, "SELECT count(*) FROM dblock_locks"); err != nil {
					t.Fatal(err)
				}
				return tx
			}
			tx1, tx2 := begin(store.Of(db1)), begin(store.Of(db2))
			if _, err := tx1.ExecContext(ctx, "UPDATE dblock_locks SET metadata = 'one' WHERE name = 'a'"); err != nil {
				t.Fatalf("first writer: %v", err)
			}
			var err error
			if journal == "WAL" {
				if err := tx1.Commit(); err != nil {
					t.Fatalf("first writer's commit: %v", err)
				}
				_, err = tx2.ExecContext(ctx, "UPDATE dblock_locks SET metadata = 'two' WHERE name = 'b'")
				err = store.Of(db2).Classify(err)
				if !errors.Is(err, dblock.ErrSerialization) || !store.IsRetryable(err) {
					t.Fatalf("write on a stale snapshot classified as %v, want ErrSerialization", err)
				}
				return
			}
			_, err = tx2.ExecContext(ctx, "UPDATE dblock_locks SET metadata = 'two' WHERE name = 'b'")
			err = store.Of(db2).Classify(err)
			if !errors.Is(err, dblock.ErrNotAcquired) || errors.Is(err, dblock.ErrSerialization) || !store.IsRetryable(err) {
				t.Fatalf("second writer (rollback journal) classified as %v, want ErrNotAcquired", err)
			}
			if err := tx2.Rollback(); err != nil {
				t.Fatal(err)
			}
			if err := tx1.Commit(); err != nil {
				t.Fatalf("first writer's commit once the second gave up: %v", err)
			}
		})
	}
}

// TestMigrateHint: a missing table is ErrSchemaMissing with a goose command
// that works as shown: MySQL's names go-sql-driver's DSN form (goose takes
// no mysql:// scheme), SQLite's names the database file.
func TestMigrateHint(t *testing.T) {
	t.Parallel()
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.NewEmpty(t, kind)
			_, err := iso.Store().AcquireLease(context.Background(), nil, store.AcquireParams{Name: "x", Owner: "o", Mode: dblock.ModeOptimistic, TTL: time.Second})
			if !errors.Is(err, dblock.ErrSchemaMissing) {
				t.Fatalf("got %v, want ErrSchemaMissing", err)
			}
			msg := err.Error()
			want := map[store.Kind]string{
				store.Postgres: `goose -dir migrations/postgres -table dblock_db_version postgres "$DSN" up`,
				store.MySQL:    `goose -dir migrations/mysql -table dblock_db_version mysql "user:pass@tcp(host:3306)/db?parseTime=true" up`,
				store.SQLite:   `goose -dir migrations/sqlite -table dblock_db_version sqlite3 ` + strings.TrimPrefix(iso.DSN, "sqlite://") + ` up`,
			}[kind]
			if !strings.Contains(msg, "dblock migrate up") || !strings.Contains(msg, want) {
				t.Fatalf("hint %q\ndoes not name %q", msg, want)
			}
		})
	}
}

// TestMissingProcedure: on a MariaDB database migrated before MySQL
// migration 00025, a reader's acquisition calls dblock_acquire_share, which
// gives the reader a share; migrated before its procedures (00014), it is
// ErrSchemaMissing with the hint, like a missing table.
func TestMissingProcedure(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	ctx := context.Background()
	if _, err := iso.Store().ExecContext(ctx, "DROP PROCEDURE dblock_acquire_read"); err != nil {
		t.Fatal(err)
	}
	// The first reads, at once on a DB that has not met the refusal yet:
	// every one falls back, none reports the refusal.
	fresh := store.Of(iso.Open(t))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			res, err := fresh.AcquireShare(ctx, store.ShareParams{Name: fmt.Sprintf("first-%d", i), Owner: "o", TTL: time.Minute})
			if err == nil && !res.Acquired {
				err = fmt.Errorf("not acquired: %+v", res)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a first read without dblock_acquire_read: %v", err)
		}
	}
	res, err := iso.Store().AcquireShare(ctx, store.ShareParams{Name: "before-00025", Owner: "o", TTL: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("read without dblock_acquire_read: %+v, %v", res, err)
	}
	var shares int
	if err := iso.Store().GetContext(ctx, &shares, "SELECT COUNT(*) FROM dblock_shares WHERE name = 'before-00025'"); err != nil || shares != 1 {
		t.Fatalf("shares of the reader alone without dblock_acquire_read: %d, %v; want 1", shares, err)
	}
	if _, err := iso.Store().ExecContext(ctx, "DROP PROCEDURE dblock_acquire_share"); err != nil {
		t.Fatal(err)
	}
	_, err = iso.Store().AcquireShare(ctx, store.ShareParams{Name: "x", Owner: "o", TTL: time.Second})
	if iso.Store().Dialect.Shared().Acquire == "" {
		if err != nil {
			t.Fatalf("MySQL 8 reads without the procedure: %v", err)
		}
		return
	}
	if !errors.Is(err, dblock.ErrSchemaMissing) || !strings.Contains(err.Error(), "dblock migrate up") {
		t.Fatalf("got %v, want ErrSchemaMissing with the hint", err)
	}
}

// TestMissingFunction: a fair waiter's check on a PostgreSQL database
// migrated before dblock_queue_ahead (migration 00016) is ErrSchemaMissing
// with the hint, like a missing table.
func TestMissingFunction(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	ctx := context.Background()
	db := iso.Store()
	w, err := db.Enqueue(ctx, nil, "x", "o", store.WaitExclusive, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DROP FUNCTION dblock_queue_ahead(text, text, timestamptz, bigint)"); err != nil {
		t.Fatal(err)
	}
	_, err = db.CheckWaiter(ctx, nil, "x", w.ID)
	if !errors.Is(err, dblock.ErrSchemaMissing) || !strings.Contains(err.Error(), "dblock migrate up") {
		t.Fatalf("got %v, want ErrSchemaMissing with the hint", err)
	}
}

// TestKeywordDSNOpens: a libpq keyword/value DSN opens PostgreSQL, and
// errors about one never show its password.
func TestKeywordDSNOpens(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(dbtest.ServerDSN(store.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	kv := fmt.Sprintf("host=%s port=%s dbname=%s user=%s sslmode=disable", u.Hostname(), u.Port(), strings.TrimPrefix(u.Path, "/"), u.User.Username())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := store.Open(ctx, kv)
	if err != nil {
		dbtest.Unavailable(t, fmt.Sprintf("keyword DSN %q: %v", kv, err))
		return
	}
	defer db.Close()
	if db.Dialect.Kind() != store.Postgres {
		t.Fatalf("kind %v", db.Dialect.Kind())
	}
	if r := store.Redact("host=h user=u password=s3cret dbname=d"); strings.Contains(r, "s3cret") {
		t.Fatalf("Redact kept the password: %q", r)
	}
}

func TestParseDSN(t *testing.T) {
	t.Parallel()
	good := map[string]store.Kind{
		"postgres://u@h/db":                  store.Postgres,
		"postgresql://u:p@h:5432/db":         store.Postgres,
		"mysql://root@tcp(127.0.0.1:3306)/t": store.MySQL,
		"sqlite://dblock.db":                 store.SQLite,
		"sqlite:///tmp/x.db":                 store.SQLite,
		"file:dblock.db":                     store.SQLite,
		"host=db dbname=app user=app":        store.Postgres,
		"dbname=app":                         store.Postgres,
	}
	for dsn, want := range good {
		if kind, _, err := store.ParseDSN(dsn); err != nil || kind != want {
			t.Errorf("ParseDSN(%q) = %v, %v; want %v", dsn, kind, err, want)
		}
	}
	for _, bad := range []string{"", "redis://h", "localhost:5432", "sqlite://", "file:", "sslmode=disable", "a=b"} {
		if _, _, err := store.ParseDSN(bad); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("ParseDSN(%q) error = %v, want ErrInvalidOption", bad, err)
		}
	}
	_, err := store.Open(context.Background(), "mysql://u:secret@tcp(h:1/db")
	if !errors.Is(err, dblock.ErrInvalidOption) || containsSecret(err) {
		t.Errorf("bad mysql DSN: %v", err)
	}
	// Schemes in any case; the driver gets a DSN it recognises.
	for dsn, want := range map[string]string{
		"POSTGRES://u@h/db":          "postgres://u@h/db",
		"PostgreSQL://u@h/db":        "postgresql://u@h/db",
		"MYSQL://root@tcp(h:3306)/t": "root@tcp(h:3306)/t",
		"SQLITE://dblock.db":         "dblock.db",
		"FILE:dblock.db":             "dblock.db",
	} {
		if _, rest, err := store.ParseDSN(dsn); err != nil || rest != want {
			t.Errorf("ParseDSN(%q) rest = %q, %v; want %q", dsn, rest, err, want)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		// URL user information; net/url splits at the authority's last '@'.
		"postgres://u:secret@h/db":           "postgres://u:xxxxx@h/db",
		"postgresql://u:se@cret@h:5432/db":   "postgresql://u:xxxxx@h:5432/db",
		"postgres://u:secret@h1,h2/db?x=a@b": "postgres://u:xxxxx@h1,h2/db?x=a@b",
		"postgres://u@h/db":                  "postgres://u@h/db",
		"redis://:secret@h":                  "redis://:xxxxx@h",
		// URL query parameters.
		"postgres://u@h/db?password=secret":                   "postgres://u@h/db?password=xxxxx",
		"postgres://u@h/db?sslmode=disable&password=secret&x": "postgres://u@h/db?sslmode=disable&password=xxxxx&x",
		"postgres://u@h/db?sslpassword=secret#frag":           "postgres://u@h/db?sslpassword=xxxxx#frag",
		"postgres://u@h/db?PASSWORD=secret":                   "postgres://u@h/db?PASSWORD=xxxxx",
		// Keyword/value DSNs, bare and quoted values.
		"host=h user=u password=secret dbname=d":    "host=h user=u password=xxxxx dbname=d",
		"host=h password = 'se cret\\' x' dbname=d": "host=h password=xxxxx dbname=d",
		"password=secret host=h sslpassword=secret": "password=xxxxx host=h sslpassword=xxxxx",
		"host=h user=u": "host=h user=u",
		// go-sql-driver DSNs, with and without the scheme: the password may
		// hold '@', ':' and '/' (the driver splits at the last '/', the last
		// '@' before it and the first ':').
		"mysql://u:secret@tcp(h:3306)/db":                   "mysql://u:xxxxx@tcp(h:3306)/db",
		"MYSQL://u:se:c@r/et@tcp(h:3306)/db?parseTime=true": "MYSQL://u:xxxxx@tcp(h:3306)/db?parseTime=true",
		"u:secret@unix(/run/mysqld/mysqld.sock)/db":         "u:xxxxx@unix(/run/mysqld/mysqld.sock)/db",
		"mysql://u@tcp(h:3306)/db":                          "mysql://u@tcp(h:3306)/db",
		// No password at all.
		"sqlite://dblock.db":                 "sqlite://dblock.db",
		"file:x.db?_pragma=busy_timeout(50)": "file:x.db?_pragma=busy_timeout(50)",
	}
	for dsn, want := range cases {
		got := store.Redact(dsn)
		if got != want {
			t.Errorf("Redact(%q) = %q, want %q", dsn, got, want)
		}
		if strings.Contains(got, "cret") || strings.Contains(got, "r/et") {
			t.Errorf("Redact(%q) = %q shows (part of) the password", dsn, got)
		}
	}
}

// TestOpenErrorsHideThePassword: every error Open returns for a DSN that
// carries a password, wherever in the DSN, leaves the password out.
func TestOpenErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dsn := range []string{
		"postgres://u:secret@127.0.0.1:1/db?sslmode=disable&connect_timeout=5", // refused
		"postgres://u@127.0.0.1:1/db?sslmode=disable&password=secret",          // refused
		"postgres://u:secret@127.0.0.1:1/db?sslmode=bogus",                     // pgx refuses the DSN
		"host=127.0.0.1 port=1 user=u password=secret",                         // no scheme
		"mysql://u:secret@tcp(127.0.0.1:1)/db",                                 // refused
		"mysql://u:secret@tcp(127.0.0.1:1)/db?parseTime=maybe",                 // the driver refuses the DSN
		"redis://u:secret@127.0.0.1:1",                                         // unknown scheme
	} {
		_, err := store.Open(ctx, dsn)
		if err == nil {
			t.Errorf("Open(%q): no error", store.Redact(dsn))
			continue
		}
		if !errors.Is(err, dblock.ErrInvalidOption) && !errors.Is(err, dblock.ErrUnavailable) {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption or ErrUnavailable", store.Redact(dsn), err)
		}
		if containsSecret(err) {
			t.Errorf("Open(%q) error shows the password: %v", store.Redact(dsn), err)
		}
	}
}

// TestOpenUppercaseScheme: POSTGRES:// reaches the server like postgres://.
func TestOpenUppercaseScheme(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			scheme, rest, _ := strings.Cut(iso.DSN, "://")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db, err := store.Open(ctx, strings.ToUpper(scheme)+"://"+rest)
			if err != nil {
				t.Fatalf("Open with the scheme in upper case: %v", err)
			}
			defer db.Close()
			if db.Dialect.Kind() != kind {
				t.Fatalf("dialect %s, want %s", db.Dialect.Kind(), kind)
			}
			if _, err := db.LeaseHolder(ctx, nil, "x"); err != nil {
				t.Fatalf("a statement through the upper-case DSN: %v", err)
			}
		})
	}
}

func containsSecret(err error) bool { return err != nil && contains(err.Error(), "secret") }

// cutProxy forwards one loopback listener to target and can cut every
// connection it carries, so a statement's answer is lost mid-flight.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // Closed at cleanup.
			}
			up, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// cut closes every connection carried so far.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

var hostPort = regexp.MustCompile(`(@|tcp\()([^/()@]+:[0-9]+)`)

// TestClassifyConnectionCut cuts the connection while a statement runs: the
// driver's error (EOF, reset, bad connection) must be classified as
// dblock.ErrUnavailable, the outcome-unknown class that callers retry and
// resolve, and never as "not acquired".
func TestClassifyConnectionCut(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			m := hostPort.FindStringSubmatchIndex(iso.DSN)
			if m == nil {
				t.Fatalf("no host:port in the test DSN %s", store.Redact(iso.DSN))
			}
			px := newCutProxy(t, iso.DSN[m[4]:m[5]])
			dsn := iso.DSN[:m[4]] + px.ln.Addr().String() + iso.DSN[m[5]:]
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db, err := store.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			sleep := "SELECT pg_sleep($1)"
			if kind == store.MySQL {
				sleep = "SELECT SLEEP(?)"
			}
			// Through the pool, with an argument, like every dblock statement:
			// the driver must not report the cut as "never sent" (ErrBadConn),
			// or database/sql would run the statement again on another
			// connection. (pgx's simple protocol, default_query_exec_mode=
			// simple_protocol, does so for statements without arguments.)
			res := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := db.ExecContext(ctx, sleep, 5)
				res <- err
			}()
			time.Sleep(300 * time.Millisecond) // The statement is on the server.
			px.cut()
			err = db.Classify(<-res)
			if err == nil {
				t.Fatalf("a statement whose connection was cut returned no error after %v (run again?)", time.Since(start))
			}
			if !errors.Is(err, dblock.ErrUnavailable) || errors.Is(err, dblock.ErrNotAcquired) {
				t.Fatalf("cut connection classified as %v", err)
			}
		})
	}
}

// TestMySQLOneRoundTrip: on MySQL/MariaDB a statement with arguments is sent
// as one query (arguments interpolated by the driver), not prepared,
// executed and closed on the server: the session's prepare count stays put.
func TestMySQLOneRoundTrip(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.MySQL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := iso.Store().Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	prepares := func() int64 {
		var name string
		var n int64
		if err := conn.QueryRowxContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n); err != nil {
			t.Fatalf("read Com_stmt_prepare: %v", err)
		}
		return n
	}
	before := prepares()
	var got int64
	if err := conn.QueryRowxContext(ctx, "SELECT ? + 1", 41).Scan(&got); err != nil || got != 42 {
		t.Fatalf("SELECT ? + 1 with 41: %d, %v", got, err)
	}
	if after := prepares(); after != before {
		t.Fatalf("a statement with arguments was prepared on the server (%d prepares, was %d)", after, before)
	}
}

// TestClassifyTooManyConnections: a connection the server refuses for want
// of slots (SQLSTATE 53300; here a role whose connection limit is 0, as when
// max_connections is reached under load) is ErrUnavailable, not a raw error.
func TestClassifyTooManyConnections(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	role := "dbt_nolimit_" + strings.ToLower(strings.TrimPrefix(locktestName(), "x"))
	if _, err := iso.Store().ExecContext(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD 'pw' CONNECTION LIMIT 0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = iso.Store().ExecContext(context.Background(), "DROP ROLE "+role) })
	u, err := url.Parse(strings.TrimPrefix(dbtest.ServerDSN(store.Postgres), ""))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "pw")
	raw, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	err = raw.PingContext(ctx)
	if err == nil {
		t.Fatal("a role with connection limit 0 connected")
	}
	if got := store.PostgresDialect().Classify(err); !errors.Is(got, dblock.ErrUnavailable) {
		t.Fatalf("refused for want of connection slots: %v, want ErrUnavailable", got)
	}
}

// locktestName is a short random identifier suffix.
func locktestName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "x" + hex.EncodeToString(b[:])
}

// TestMissingColumn: on a database migrated before the column a statement
// names (here a semaphore's grant, without dblock_permits.request), the
// error is ErrSchemaMissing with the migrate hint, like a missing table.
func TestMissingColumn(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		if _, err := iso.Store().ExecContext(ctx, "ALTER TABLE dblock_permits DROP COLUMN request"); err != nil {
			t.Fatal(err)
		}
		_, err := iso.Store().AcquirePermits(ctx, store.PermitParams{Name: "x", Owner: "o", Limit: 1, Permits: 1, TTL: time.Second, Request: store.NewRequest()})
		if !errors.Is(err, dblock.ErrSchemaMissing) || !strings.Contains(err.Error(), "dblock migrate up") {
			t.Fatalf("a grant without its column = %v, want ErrSchemaMissing with the hint", err)
		}
	})
}
