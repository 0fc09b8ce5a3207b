package store

import (
	"context"
	"time"
)

// PostgreSQL's queue engine: the insert returns the waiter's id and
// created_at, and leaving notifies the name, answering one row when the
// waiter was there.

func (postgres) enqueue(ctx context.Context, db *DB, q Querier, name, owner string, timeout time.Duration) (WaiterTicket, error) {
	return db.enqueueReturning(ctx, q, name, owner, timeout)
}

func (d postgres) leaveQueue(ctx context.Context, db *DB, q Querier, id int64) (bool, error) {
	return db.queryFlag(ctx, q, d.Queue().Leave, id)
}
