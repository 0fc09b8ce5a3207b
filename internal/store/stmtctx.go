package store

import (
	"context"
	"time"
)

// StatementContext bounds one statement on db by d, as
// context.WithTimeout(parent, d) does. When parent can never be cancelled
// (its Done is nil: the engines pass context.WithoutCancel(...) for
// statements their caller may not cut short, and a release called with
// context.Background() is the same) and db runs statements through a
// native path (PostgreSQL's pgx), the context returned also says that its
// deadline is its only end (DeadlineOnly), so that the native path sets the
// deadline on the connection instead of having pgx watch the context: pgx
// watches a cancellable context with context.AfterFunc, six allocations and
// a goroutine hand-off per statement.
func (db *DB) StatementContext(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, d)
	if db.native == nil || parent.Done() != nil {
		return ctx, cancel
	}
	return &deadlineOnly{Context: ctx, bare: parent}, cancel
}

// deadlineOnly is a context whose only end is its deadline; bare is the
// same context without the deadline (never cancelled).
type deadlineOnly struct {
	context.Context
	bare context.Context
}

// DeadlineOnly reports, for a context made by StatementContext whose only
// end is its deadline, that deadline and the context without it: a caller
// that enforces the deadline by other means (a deadline on the connection)
// may run the statement under bare. ok is false for any other context.
func DeadlineOnly(ctx context.Context) (deadline time.Time, bare context.Context, ok bool) {
	d, ok := ctx.(*deadlineOnly)
	if !ok {
		return time.Time{}, nil, false
	}
	deadline, _ = d.Deadline()
	return deadline, d.bare, true
}
