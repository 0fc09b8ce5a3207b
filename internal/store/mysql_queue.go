package store

import (
	"context"
	"time"
)

// MySQL's and MariaDB's queue engine: the insert cannot return the waiter,
// so its id comes from LAST_INSERT_ID (and its created_at from a later
// CheckWaiter).

func (d mysqlDialect) enqueue(ctx context.Context, db *DB, q Querier, name, owner string, kind WaitKind, timeout time.Duration) (WaiterTicket, error) {
	r, err := db.exec(ctx, q, d.Queue().Enqueue, name, owner, string(kind), timeout.Microseconds())
	if err != nil {
		return WaiterTicket{}, db.Classify(err)
	}
	id, err := r.LastInsertId()
	if err != nil {
		return WaiterTicket{}, err
	}
	return WaiterTicket{ID: id}, nil
}

// checkArgs: MySQL's Check takes its positional arguments in text order.
func (mysqlDialect) checkArgs(name string, id int64) []any { return []any{name, name, id, name, name} }
