package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dblock-go/dblock/internal/store"
)

// nativeTries bounds the connections a native statement tries when the
// first ones turn out dead before anything was sent (pgconn.SafeToRetry),
// as database/sql does for its own statements.
const nativeTries = 3

// native runs single statements on a pgx pool through pgx itself: pgx's
// QueryRow and Exec on a pooled connection skip database/sql's statement,
// rows and argument conversion (about twenty allocations per statement).
// A pool of another driver gets nil.
func native(pool *sql.DB) *store.Native {
	if _, ok := pool.Driver().(*stdlib.Driver); !ok {
		return nil
	}
	n := pgNative{pool: pool}
	return &store.Native{QueryRow: n.queryRow, Exec: n.exec, QueryRowOn: queryRowOn, ExecOn: execOn,
		DiscardedSession: discardedSession}
}

// queryRowOn and execOn run one statement on a pinned connection (in the
// transaction it may be in), through pgx (runOn).
func queryRowOn(ctx context.Context, conn *sql.Conn, query string, args []any, dest ...any) error {
	if dest == nil {
		dest = []any{} // A row is still read (sql.ErrNoRows without one).
	}
	_, err := runOn(ctx, conn, query, args, dest)
	return err
}

func execOn(ctx context.Context, conn *sql.Conn, query string, args ...any) (int64, error) {
	return runOn(ctx, conn, query, args, nil)
}

// runOn runs query on conn, scanning its first row into dest, or, with dest
// nil, returning the rows it affected. The first statement of a
// transaction whose BEGIN was deferred carries it (see lazyConn).
func runOn(ctx context.Context, conn *sql.Conn, query string, args, dest []any) (int64, error) {
	var affected int64
	err := conn.Raw(func(dc any) error {
		if lc, ok := dc.(*lazyConn); ok && lc.pending() {
			return bounded(ctx, lc.stdConn, func(ctx context.Context, _ *pgx.Conn) error {
				var err error
				affected, err = lc.beginWith(ctx, query, args, dest)
				return err
			})
		}
		sc, err := stdlibConn(dc)
		if err != nil {
			return err
		}
		return bounded(ctx, sc, func(ctx context.Context, c *pgx.Conn) error {
			if dest != nil {
				return c.QueryRow(ctx, query, args...).Scan(dest...)
			}
			tag, err := c.Exec(ctx, query, args...)
			affected = tag.RowsAffected()
			return err
		})
	})
	return affected, err
}

// discardedSession returns the pid of conn's backend, which pgx learned
// when it connected, and the socket's local TCP port, once pgx has closed
// the connection (it does when a statement's context ends while the
// statement is in flight, sending the server a cancel of it from another
// connection, later).
func discardedSession(conn *sql.Conn) (s store.CutOffSession, ok bool) {
	_ = conn.Raw(func(dc any) error {
		sc, isPgx := dc.(*stdlib.Conn)
		if lc, lazy := dc.(*lazyConn); lazy {
			sc, isPgx = lc.stdConn, true
		}
		if !isPgx || !sc.Conn().IsClosed() {
			return nil
		}
		pc := sc.Conn().PgConn()
		if a, tcp := pc.Conn().LocalAddr().(*net.TCPAddr); tcp {
			s, ok = store.CutOffSession{ID: int64(pc.PID()), ClientPort: a.Port}, true
		}
		return nil
	})
	return s, ok
}

type pgNative struct{ pool *sql.DB }

func (n pgNative) queryRow(ctx context.Context, query string, args []any, dest ...any) error {
	return n.onConn(ctx, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, query, args...).Scan(dest...)
	})
}

func (n pgNative) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var affected int64
	err := n.onConn(ctx, func(ctx context.Context, c *pgx.Conn) error {
		tag, err := c.Exec(ctx, query, args...)
		affected = tag.RowsAffected()
		return err
	})
	return affected, err
}

// onConn runs fn on a pooled connection, on another when the connection
// was found dead before fn sent anything; a dead connection is dropped.
func (n pgNative) onConn(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	var err error
	for range nativeTries {
		var c *sql.Conn
		if c, err = n.pool.Conn(ctx); err != nil {
			return err
		}
		retry := false
		err = c.Raw(func(dc any) error {
			sc, ferr := stdlibConn(dc)
			if ferr != nil {
				return ferr
			}
			ferr = bounded(ctx, sc, fn)
			if ferr != nil && pgconn.SafeToRetry(ferr) {
				retry = true
				return driver.ErrBadConn // database/sql drops the connection
			}
			return ferr
		})
		_ = c.Close()
		if !retry {
			return err
		}
	}
	return err
}

// bounded runs fn on sc's pgx connection under ctx, its end carried by
// the connection's socket (store.ArmDeadline): a deadline set on it, a
// cancellation expiring it, and fn run under a context that pgx need not
// watch. A statement that fails once ctx ended fails with ctx's error
// (store.Ended), and pgx closes its connection, as after a cancellation
// that the server did not answer in time.
func bounded(ctx context.Context, sc *stdlib.Conn, fn func(context.Context, *pgx.Conn) error) error {
	c := sc.Conn()
	nc := c.PgConn().Conn()
	run, a, err := store.ArmDeadline(ctx, nc)
	if err != nil {
		return err
	}
	err = fn(run, c)
	if !a.Armed() {
		return err
	}
	a.Disarm(nc)
	if errors.Is(err, os.ErrDeadlineExceeded) && a.Ended() {
		err = store.Ended(ctx, err)
	}
	return err
}
