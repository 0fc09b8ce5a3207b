package store

import (
	"context"
	"time"
)

// SQLite's queue engine: the insert returns the waiter's id and created_at.

func (sqliteDialect) enqueue(ctx context.Context, db *DB, q Querier, name, owner string, kind WaitKind, timeout time.Duration) (WaiterTicket, error) {
	return db.enqueueReturning(ctx, q, name, owner, kind, timeout)
}

// checkArgs: SQLite's Check is MySQL's, positional arguments in text order.
func (sqliteDialect) checkArgs(name string, id int64) []any { return []any{name, name, id, name, name} }
