package store

import (
	"context"
	"time"
)

// SQLite's queue engine: the insert returns the waiter's id and created_at,
// and leaving reports the affected rows.

func (sqliteDialect) enqueue(ctx context.Context, db *DB, q Querier, name, owner string, timeout time.Duration) (WaiterTicket, error) {
	return db.enqueueReturning(ctx, q, name, owner, timeout)
}

func (d sqliteDialect) leaveQueue(ctx context.Context, db *DB, q Querier, id int64) (bool, error) {
	return db.execOne(ctx, q, d.Queue().Leave, id)
}
