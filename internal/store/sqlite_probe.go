package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
)

// SQLite's probes: a pessimistic hold is the database's write lock, so the
// probe tries BEGIN IMMEDIATE with a short busy timeout and rolls back at
// once, and reports the lock held, not which name; the clock is sqliteNow.

// sqliteProbeBusyTimeout is how long the SQLite probe waits for the write
// lock before calling it held: the bound a lease acquire waits too
// (sqliteLeaseBusyTimeout), so that ordinary writers, which hold the lock for
// one commit, are not taken for a transaction hold.
const sqliteProbeBusyTimeout = sqliteLeaseBusyTimeout

func (sqliteDialect) probeTxHolds(ctx context.Context, db *DB, _ []string, _ int) (TxHolds, error) {
	locked, err := db.sqliteWriteLocked(ctx)
	return TxHolds{WriteLocked: locked}, err
}

// sqliteWriteLocked reports whether another connection holds the database's
// write lock for longer than sqliteProbeBusyTimeout.
func (db *DB) sqliteWriteLocked(ctx context.Context) (locked bool, err error) {
	c, err := db.Connx(ctx)
	if err != nil {
		return false, db.Classify(err)
	}
	defer c.Close()
	prev, err := db.SQLiteBusyTimeout(ctx, c, sqliteProbeBusyTimeout)
	if err != nil {
		return false, err
	}
	restore := func(c *sqlx.Conn, stmts ...string) {
		for _, s := range stmts {
			if _, err := c.ExecContext(context.WithoutCancel(ctx), s); err != nil {
				// A connection left in a transaction or with the short
				// timeout must not go back to the pool.
				_ = c.Raw(func(any) error { return driver.ErrBadConn })
				return
			}
		}
	}
	_, err = c.ExecContext(ctx, "BEGIN IMMEDIATE")
	err = db.Classify(err)
	switch {
	case err == nil:
		restore(c, "ROLLBACK", fmt.Sprintf("PRAGMA busy_timeout = %d", prev.Milliseconds()))
		return false, nil
	case errors.Is(err, dblock.ErrNotAcquired):
		restore(c, fmt.Sprintf("PRAGMA busy_timeout = %d", prev.Milliseconds()))
		return true, nil
	}
	restore(c, fmt.Sprintf("PRAGMA busy_timeout = %d", prev.Milliseconds()))
	return false, err
}

func (sqliteDialect) clockNowSQL() string { return `SELECT ` + sqliteNow }
