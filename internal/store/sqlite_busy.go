package store

import (
	"context"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// SQLite has one writer per database: statements of a wait bounded by its
// caller wait for the write lock a short while only.

// sqliteLeaseBusyTimeout is how long a SQLite lease acquire waits for the
// database's single write lock. Ordinary writers hold it for one commit; a
// pessimistic lock holds it for a whole transaction, and an acquire must not
// wait for that (the pool's busy timeout is seconds).
const sqliteLeaseBusyTimeout = 100 * time.Millisecond

// sqliteShortBusy runs fn on a pinned connection whose busy timeout is
// sqliteLeaseBusyTimeout, restoring the connection's own timeout afterwards
// (SQLite runs in-process, so the extra statements cost microseconds). A
// connection whose timeout cannot be restored is discarded.
func (db *DB) sqliteShortBusy(ctx context.Context, fn func(c *sqlx.Conn) error) error {
	c, restore, err := db.shortBusyConn(ctx)
	if err != nil {
		return err
	}
	defer restore()
	return fn(c)
}

// shortBusyConn pins a SQLite connection whose busy timeout is
// sqliteLeaseBusyTimeout; restore puts the connection's own timeout back
// (or discards the connection) and returns it to the pool.
func (db *DB) shortBusyConn(ctx context.Context) (c *sqlx.Conn, restore func(), err error) {
	c, err = db.Connx(ctx)
	if err != nil {
		return nil, nil, err
	}
	var prev int64
	if err := c.QueryRowxContext(ctx, "PRAGMA busy_timeout").Scan(&prev); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", sqliteLeaseBusyTimeout.Milliseconds())); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, func() {
		if _, rerr := c.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", prev)); rerr != nil {
			_ = c.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = c.Close()
	}, nil
}

// onPoolShortBusy runs fn on q, or, when q is nil, on the pool; on SQLite
// the pool's statement then waits for the database's write lock
// sqliteLeaseBusyTimeout at most (a pessimistic holder keeps it for its whole
// transaction, and a statement of a wait bounded by its caller must not wait
// out the pool's busy timeout). A busy database is an error wrapping
// dblock.ErrNotAcquired.
func (db *DB) onPoolShortBusy(ctx context.Context, q Querier, fn func(q Querier) error) error {
	if q != nil {
		return fn(q)
	}
	return db.Dialect.onPool(ctx, db, fn)
}

// BeginWriteTx begins a transaction on the pool that writes; on SQLite it
// waits for the database's write lock sqliteLeaseBusyTimeout at most (see
// onPoolShortBusy). Call end once the transaction is committed or rolled
// back.
func (db *DB) BeginWriteTx(ctx context.Context) (tx *sqlx.Tx, end func(), err error) {
	return db.Dialect.beginWriteTx(ctx, db)
}

// beginWriteTx is BeginWriteTx on SQLite.
func (sqliteDialect) beginWriteTx(ctx context.Context, db *DB) (tx *sqlx.Tx, end func(), err error) {
	c, restore, err := db.shortBusyConn(ctx)
	if err != nil {
		return nil, nil, db.Classify(err)
	}
	if tx, err = c.BeginTxx(ctx, nil); err != nil {
		restore()
		return nil, nil, db.Classify(err)
	}
	return tx, restore, nil
}

// onPool is onPoolShortBusy on SQLite's pool.
func (sqliteDialect) onPool(ctx context.Context, db *DB, fn func(q Querier) error) error {
	return db.sqliteShortBusy(ctx, func(c *sqlx.Conn) error { return fn(c) })
}
