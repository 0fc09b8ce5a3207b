package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/mysql" // The drivers of every kind the tests run.
	_ "github.com/dblock-go/dblock/dialect/postgres"
	_ "github.com/dblock-go/dblock/dialect/sqlite"
	"github.com/dblock-go/dblock/internal/isolate"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

// Default server DSNs, overridden by DBLOCK_TEST_POSTGRES / DBLOCK_TEST_MYSQL.
const (
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	DefaultMySQL    = "mysql://root@tcp(127.0.0.1:3306)/test"
)

// Kinds lists every dialect, in the order tests run them.
var Kinds = []store.Kind{store.Postgres, store.MySQL, store.SQLite}

// ServerDSN returns the configured server DSN for kind ("" for SQLite).
func ServerDSN(kind store.Kind) string {
	switch kind {
	case store.Postgres:
		if v := os.Getenv("DBLOCK_TEST_POSTGRES"); v != "" {
			return v
		}
		return DefaultPostgres
	case store.MySQL:
		if v := os.Getenv("DBLOCK_TEST_MYSQL"); v != "" {
			return v
		}
		return DefaultMySQL
	}
	return ""
}

type server struct {
	once sync.Once
	db   *store.DB
	err  error
}

var servers sync.Map // store.Kind -> *server

// admin returns a shared connection to kind's server, or fails/skips t.
func admin(t testing.TB, kind store.Kind) *store.DB {
	t.Helper()
	v, _ := servers.LoadOrStore(kind, &server{})
	s := v.(*server)
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		s.db, s.err = store.Open(ctx, ServerDSN(kind))
	})
	if s.err != nil {
		Unavailable(t, fmt.Sprintf("%s server at %s unreachable: %v", kind, store.Redact(ServerDSN(kind)), s.err))
	}
	return s.db
}

// Unavailable fails t under CI=true and skips it otherwise, printing why.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") != "" && os.Getenv("CI") != "false" {
		t.Fatalf("dbtest: %s (CI requires every database; run scripts/dbup.sh)", reason)
	}
	t.Skipf("dbtest: SKIPPED: %s (run scripts/dbup.sh, or set DBLOCK_TEST_POSTGRES / DBLOCK_TEST_MYSQL)", reason)
}

// Isolated is one test's database.
type Isolated struct {
	Kind store.Kind
	// DSN opens the isolated database from another process (dblock DSN syntax).
	DSN string
	// DB is a pool on it, closed at cleanup, as users hold it.
	DB *dialect.DB
}

// Store returns the store behind DB, for the tests' own statements and the
// administrators' calls.
func (iso *Isolated) Store() *store.DB { return store.Of(iso.DB) }

// New returns a fresh, migrated database of kind for t, dropped at cleanup.
func New(t testing.TB, kind store.Kind) *Isolated {
	t.Helper()
	iso := NewEmpty(t, kind)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := migrations.Up(ctx, iso.DB); err != nil {
		t.Fatalf("dbtest: migrate %s: %v", kind, err)
	}
	if os.Getenv(HistoryEnv) != "" && iso.Store().HistorySupported() {
		if err := iso.Store().EnableHistory(ctx); err != nil {
			t.Fatalf("dbtest: enable history on %s: %v", kind, err)
		}
	}
	return iso
}

// HistoryEnv, when set, makes New enable the acquisition history (its
// trigger on dblock_locks) on every database that keeps one, so that a
// suite runs with every acquisition's end recorded (make test-history).
const HistoryEnv = "DBLOCK_TEST_HISTORY"

// NewEmpty is New without migrations.
func NewEmpty(t testing.TB, kind store.Kind) *Isolated {
	t.Helper()
	var adm *store.DB
	if kind != store.SQLite {
		adm = admin(t, kind)
	}
	dsn := isolate.DSN(t, adm, kind, ServerDSN(kind), isolate.Name("dbt_"))
	return &Isolated{Kind: kind, DSN: dsn, DB: isolate.Open(t, dsn)}
}

// Open opens another pool on iso's database (closed at cleanup), as a second
// client would.
func (iso *Isolated) Open(t testing.TB) *dialect.DB {
	t.Helper()
	return isolate.Open(t, iso.DSN)
}

// ForEach runs fn as a parallel subtest per dialect, each on its own database.
func ForEach(t *testing.T, fn func(t *testing.T, iso *Isolated)) {
	t.Helper()
	for _, kind := range Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			fn(t, New(t, kind))
		})
	}
}

// AddWaiter inserts a fair-queue waiter row for name whose heartbeat
// deadline is ttl from the database's now (negative: already stale), as a
// waiter of another process would have left it.
func AddWaiter(t testing.TB, handle *dialect.DB, name, owner string, ttl time.Duration) {
	t.Helper()
	db := store.Of(handle)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	us := ttl.Microseconds()
	var err error
	switch db.Dialect.Kind() {
	case store.Postgres:
		_, err = db.ExecContext(ctx, `INSERT INTO dblock_waiters (name, owner, expires_at)
VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 microsecond')`, name, owner, us)
	case store.MySQL:
		_, err = db.ExecContext(ctx, `INSERT INTO dblock_waiters (name, owner, created_at, heartbeat_at, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`, name, owner, us)
	default:
		now := "CAST(unixepoch('subsec') * 1000000 AS INTEGER)"
		_, err = db.ExecContext(ctx, `INSERT INTO dblock_waiters (name, owner, created_at, heartbeat_at, expires_at)
VALUES (?1, ?2, `+now+`, `+now+`, `+now+` + ?3)`, name, owner, us)
	}
	if err != nil {
		t.Fatalf("dbtest: insert waiter %s/%s: %v", name, owner, err)
	}
}

// WaitExpired waits (bounded by ctx) until the lease of name has expired by
// the database's clock: a lease ended locally may still run for a moment
// there.
func (iso *Isolated) WaitExpired(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	for {
		h, err := iso.Store().LeaseHolder(ctx, nil, name)
		if err != nil {
			t.Fatalf("read %q: %v", name, err)
		}
		if !h.ExpiresAt.After(h.Now) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%q never expired by the database's clock", name)
		}
		time.Sleep(h.ExpiresAt.Sub(h.Now) + time.Millisecond)
	}
}

// SessionID returns the server's id of the session tx runs on (PostgreSQL's
// backend pid, MySQL's connection id).
func (iso *Isolated) SessionID(t testing.TB, ctx context.Context, tx *sql.Tx) int64 {
	t.Helper()
	q := "SELECT pg_backend_pid()"
	if iso.Kind == store.MySQL {
		q = "SELECT CONNECTION_ID()"
	}
	var id int64
	if err := tx.QueryRowContext(ctx, q).Scan(&id); err != nil {
		t.Fatalf("session id: %v", err)
	}
	return id
}

// KillSession ends session id from the server's side, as an administrator
// (or the server itself) would.
func (iso *Isolated) KillSession(t testing.TB, ctx context.Context, id int64) {
	t.Helper()
	kill := "SELECT pg_terminate_backend(%d)"
	if iso.Kind == store.MySQL {
		kill = "KILL %d"
	}
	if _, err := iso.Store().ExecContext(ctx, fmt.Sprintf(kill, id)); err != nil {
		t.Fatalf("kill session %d: %v", id, err)
	}
}
