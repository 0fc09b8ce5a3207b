package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/isolate"
	"github.com/dblock-go/dblock/internal/store"
)

// TestUnwatched: the pool Open opened hands database/sql a context that
// cannot end for its queries (store.Unwatched, so that database/sql starts
// no goroutine to watch their rows), and its connections restore the
// caller's: a SLEEP(5) whose context is cancelled 200 ms in fails with
// context.Canceled, on a connection that carries the context on its socket
// and on one whose driver watches it (readTimeout in the DSN); a query on
// a new connection under a context that has ended fails at once. A pool
// with a connection limit keeps database/sql's watch (its wait for a free
// connection must end with the context): a query waiting for the one
// connection another holds fails when its context is cancelled.
func TestUnwatched(t *testing.T) {
	iso := dbtest.New(t, store.MySQL)
	db := iso.Store()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if db.PoolContext(ctx).Done() != nil {
		t.Fatal("the pool Open opened hands database/sql a context it watches")
	}
	if c := context.Background(); db.PoolContext(c) != c {
		t.Fatal("a context that cannot end was wrapped")
	}
	if err := sleepCancelled(db); !errors.Is(err, context.Canceled) {
		t.Fatalf("SLEEP(5) cancelled in flight, carried by the socket: %v, want context.Canceled", err)
	}
	watched := isolate.Open(t, withParam(iso.DSN, "readTimeout=30s"))
	if err := sleepCancelled(store.Of(watched)); !errors.Is(err, context.Canceled) {
		t.Fatalf("SLEEP(5) cancelled in flight, watched by the driver: %v, want context.Canceled", err)
	}

	fresh := isolate.Open(t, iso.DSN)
	fdb := store.Of(fresh)
	fdb.DB.SetMaxIdleConns(0)
	ended, end := context.WithCancel(context.Background())
	end()
	var one int
	if err := fdb.QueryRowxContext(ended, "SELECT 1").Scan(&one); !errors.Is(err, context.Canceled) {
		t.Fatalf("a query on a new connection under an ended context: %v (%d), want context.Canceled", err, one)
	}

	fdb.DB.SetMaxOpenConns(1)
	if fdb.PoolContext(ctx) != ctx {
		t.Fatal("a pool with a connection limit was handed an unwatched context")
	}
	conn, err := fdb.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := sleepCancelled(fdb); !errors.Is(err, context.Canceled) {
		t.Fatalf("a query waiting for the pool's one connection, cancelled: %v, want context.Canceled", err)
	}
}

// sleepCancelled runs SELECT SLEEP(5) on q (a pool: a *store.DB hands
// database/sql an unwatched context, a *sql.DB the caller's) under a
// context cancelled 200 ms in.
func sleepCancelled(q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.AfterFunc(200*time.Millisecond, cancel)
	defer timer.Stop()
	var slept int
	return q.QueryRowContext(ctx, "SELECT SLEEP(5)").Scan(&slept)
}

// withParam adds a driver parameter to a mysql:// DSN.
func withParam(dsn, param string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + param
	}
	return dsn + "?" + param
}
