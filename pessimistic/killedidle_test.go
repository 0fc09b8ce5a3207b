package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestKilledIdleConnection: the server ends a pooled connection while it is
// idle, and the pool hands it to the next hold without noticing (MySQL's
// liveness check switched off, as when the kill lands after the pool's
// check; pgx pings only a connection idle for over a second). The hold's
// first statement is its lock (on MariaDB, the call that also begins the
// transaction; on PostgreSQL, BEGIN sent with the lock): Do returns
// ErrUnavailable rather than waiting on its own transaction, fn does not
// run, the pool drops the connection, and the next hold succeeds on a new
// one. No connection stays in use.
func TestKilledIdleConnection(t *testing.T) {
	t.Parallel()
	serverKinds(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		dsn := iso.DSN
		if iso.Kind == store.MySQL {
			dsn += "?checkConnLiveness=false"
		}
		db, err := dialect.Open(ctx, dsn)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer db.Close()
		db.SQL().SetMaxOpenConns(1)
		l := newLocker(t, db, nil)
		name := randName(t)
		killed := holdSession(t, ctx, iso, l, name)
		iso.KillSession(t, ctx, killed)
		idle := time.Now()
		ran := false
		err = l.Do(ctx, name, func(context.Context, *sql.Tx) error {
			ran = true
			return nil
		})
		if iso.Kind == store.Postgres && err == nil && time.Since(idle) > time.Second {
			t.Logf("the pool pinged the killed connection (idle for over a second) and replaced it")
		} else if !errors.Is(err, dblock.ErrUnavailable) || ran {
			t.Fatalf("hold on the killed connection: %v (fn ran: %v), want ErrUnavailable and fn not run", err, ran)
		}
		if next := holdSession(t, ctx, iso, l, name); next == killed {
			t.Fatalf("the next hold ran on the killed session %d", killed)
		}
		if n := db.SQL().Stats().InUse; n != 0 {
			t.Fatalf("%d connections in use after the holds", n)
		}
	})
}

// holdSession holds name once with l and returns the server's id of the
// session the hold ran on.
func holdSession(t *testing.T, ctx context.Context, iso *dbtest.Isolated, l *pessimistic.Locker, name string) int64 {
	t.Helper()
	var id int64
	err := l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
		id = iso.SessionID(t, ctx, tx)
		return nil
	})
	if err != nil {
		t.Fatalf("hold %q: %v", name, err)
	}
	return id
}
