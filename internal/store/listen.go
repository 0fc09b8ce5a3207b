package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
)

// ErrListenUnsupported is returned by Listen on databases without LISTEN/NOTIFY.
var ErrListenUnsupported = errors.New("dialect: LISTEN not supported by this database")

// Listener receives the notifications of one channel on a dedicated
// connection taken from the pool. It is not safe for concurrent use: one
// goroutine calls Wait; to stop it, cancel Wait's context, then call Close.
type Listener interface {
	// Wait blocks until a notification arrives and returns its payload. An
	// error means the connection is unusable (or ctx ended); close the
	// Listener and open a new one.
	Wait(ctx context.Context) (payload string, err error)
	// Close discards the connection: it is never returned to the pool, since
	// it would still be listening.
	Close() error
}

// Listen takes a connection from the pool and runs LISTEN channel on it. It
// returns ErrListenUnsupported (wrapped) on databases other than PostgreSQL,
// and the server's error where a session cannot be held (a pooler in
// transaction mode may accept LISTEN and never deliver; callers keep a
// polling fallback in every case).
func (db *DB) Listen(ctx context.Context, channel string) (Listener, error) {
	if !db.Dialect.Caps().Notify {
		return nil, fmt.Errorf("%w (%s)", ErrListenUnsupported, db.Dialect.Kind())
	}
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		return nil, db.Classify(err)
	}
	drv, _ := driverFor(db.Dialect.Kind())
	if drv == nil || drv.Listen == nil || drv.Wait == nil {
		_ = conn.Close()
		return nil, fmt.Errorf("%w (%s driver)", ErrListenUnsupported, db.Dialect.Kind())
	}
	l := &pgListener{conn: conn, wait: drv.Wait}
	err = drv.Listen(ctx, conn, channel)
	if err != nil {
		_ = l.Close()
		return nil, db.Classify(err)
	}
	return l, nil
}

type pgListener struct {
	conn      *sql.Conn
	wait      func(ctx context.Context, conn *sql.Conn) (string, error)
	closeOnce sync.Once
	closeErr  error
}

func (l *pgListener) Wait(ctx context.Context) (string, error) { return l.wait(ctx, l.conn) }

func (l *pgListener) Close() error {
	l.closeOnce.Do(func() {
		// Returning driver.ErrBadConn from Raw marks the connection bad, so
		// database/sql closes it instead of pooling a listening session.
		_ = l.conn.Raw(func(any) error { return driver.ErrBadConn })
		l.closeErr = l.conn.Close()
		if errors.Is(l.closeErr, sql.ErrConnDone) || errors.Is(l.closeErr, driver.ErrBadConn) {
			l.closeErr = nil
		}
	})
	return l.closeErr
}
