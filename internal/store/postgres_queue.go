package store

import (
	"context"
	"time"
)

// PostgreSQL's queue engine: the insert returns the waiter's id and
// created_at. (Leaving, the same Exec everywhere, is in queue.go; on
// PostgreSQL its statement also notifies the name.)

func (postgres) enqueue(ctx context.Context, db *DB, q Querier, name, owner string, kind WaitKind, timeout time.Duration) (WaiterTicket, error) {
	return db.enqueueReturning(ctx, q, name, owner, kind, timeout)
}

// checkArgs: PostgreSQL's Check names each argument once.
func (postgres) checkArgs(name string, id int64) []any { return []any{name, id} }
