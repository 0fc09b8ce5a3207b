package reaper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// TestMain checks that no test leaves a goroutine behind (a cron loop, a
// pass). The database pools that internal/dbtest shares between tests stay
// open until the process ends, so their goroutines are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionCleaner"),
		goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgconn.(*PgConn).startContextWatcher.func1"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/ctxwatch.(*ContextWatcher).Watch.func1"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// randomName returns a fresh lock name with a readable prefix.
func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + ":" + hex.EncodeToString(b[:])
}

// quietLogger discards everything, keeping test output readable.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newReaper returns a Reaper on db with a quiet logger, failing t on error.
func newReaper(t testing.TB, db *dialect.DB, cfg *Config) *Reaper {
	t.Helper()
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	r, err := New(db, cfg)
	if err != nil {
		t.Fatalf("reaper.New: %v", err)
	}
	return r
}

// shifted is the SQL for the database clock moved by the microseconds bound
// at placeholder n (negative: in the past).
func shifted(db *dialect.DB, n int) string {
	ph := store.Of(db).Dialect.Placeholder(n)
	switch store.Of(db).Dialect.Kind() {
	case store.Postgres:
		return fmt.Sprintf("(now() + %s::bigint * interval '1 microsecond')", ph)
	case store.MySQL:
		return fmt.Sprintf("(UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND)", ph)
	default:
		return fmt.Sprintf("(%s + %s)", store.Of(db).Dialect.Now(), ph)
	}
}

// exec runs a test statement, failing t on error.
func exec(t testing.TB, db *dialect.DB, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.SQL().ExecContext(ctx, query, args...); err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
}

// acquire takes name for owner with ttl, failing t unless acquired.
func acquire(t testing.TB, db *dialect.DB, name, owner string, ttl time.Duration) dblock.Token {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire %s for %s: %+v %v", name, owner, res, err)
	}
	return res.Token
}

// release frees name held by (owner, token), failing t unless released.
func release(t testing.TB, db *dialect.DB, name, owner string, token dblock.Token) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if ok, err := store.Of(db).ReleaseLease(ctx, nil, name, owner, token); err != nil || !ok {
		t.Fatalf("release %s: %v %v", name, ok, err)
	}
}

// expire moves name's lease expiry by d (negative: into the past).
func expire(t testing.TB, db *dialect.DB, name string, d time.Duration) {
	t.Helper()
	exec(t, db, fmt.Sprintf("UPDATE dblock_locks SET expires_at = %s WHERE name = %s",
		shifted(db, 1), store.Of(db).Dialect.Placeholder(2)), d.Microseconds(), name)
}

// age moves name's updated_at by d (negative: into the past).
func age(t testing.TB, db *dialect.DB, name string, d time.Duration) {
	t.Helper()
	exec(t, db, fmt.Sprintf("UPDATE dblock_locks SET updated_at = %s WHERE name = %s",
		shifted(db, 1), store.Of(db).Dialect.Placeholder(2)), d.Microseconds(), name)
}

// waiters counts name's waiters.
func waiters(t testing.TB, db *dialect.DB, name string) int {
	t.Helper()
	var n int
	if err := store.Of(db).GetContext(context.Background(), &n,
		"SELECT count(*) FROM dblock_waiters WHERE name = "+store.Of(db).Dialect.Placeholder(1), name); err != nil {
		t.Fatalf("count waiters: %v", err)
	}
	return n
}

// holder reads name's row.
func holder(t testing.TB, db *dialect.DB, name string) store.Holder {
	t.Helper()
	h, err := store.Of(db).LeaseHolder(context.Background(), nil, name)
	if err != nil {
		t.Fatalf("holder %s: %v", name, err)
	}
	return h
}

// runOnce runs one pass under a hang guard, failing t on error.
func runOnce(t testing.TB, r *Reaper) Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return st
}

// untilExpired waits, by the database's clock, until every row of table for
// name expired more than grace ago, failing t after ten seconds.
func untilExpired(t testing.TB, db *dialect.DB, table, name string, grace time.Duration) {
	t.Helper()
	query := fmt.Sprintf("SELECT count(*) FROM %s WHERE name = %s AND expires_at >= %s",
		table, store.Of(db).Dialect.Placeholder(1), shifted(db, 2))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := store.Of(db).GetContext(context.Background(), &n, query, name, -grace.Microseconds()); err != nil {
			t.Fatalf("count unexpired rows of %s: %v", table, err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rows of %s for %s still unexpired after 10s", n, table, name)
		}
	}
}
