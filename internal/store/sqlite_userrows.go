package store

import (
	"context"
	"fmt"

	"github.com/dblock-go/dblock"
)

// SQLite's user-rows engine: no row locks; the write transaction, whose
// lock a write that changes nothing takes, locks every row of the database.

// checkUserRows refuses NoWait and SkipLocked, which need row locks.
func (sqliteDialect) checkUserRows(p UserRowsParams) error {
	if p.NoWait || p.SkipLocked {
		return fmt.Errorf("%w: SQLite has no row locks: NoWait and SkipLocked are not supported (the write transaction locks the whole database)", dblock.ErrInvalidOption)
	}
	return nil
}

// userRowsQuery takes the database's write lock in tx; the read itself
// locks nothing.
func (sqliteDialect) userRowsQuery(ctx context.Context, db *DB, tx Querier, table, col, query string, _ UserRowsParams) (string, error) {
	// WHERE 0 matches nothing, yet the statement is a write and
	// takes the database's write lock.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET %s = %s WHERE 0", table, col, col)); err != nil {
		return "", db.Classify(err)
	}
	return query, nil
}
