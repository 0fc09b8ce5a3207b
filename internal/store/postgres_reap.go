package store

import "context"

// PostgreSQL's reaper engine: each batch is one statement that answers how
// many rows it freed or deleted (notifying the names whose lock or queue
// changed), and idle rows are deleted without a fencing floor, since tokens
// come from a sequence.

func (d postgres) reapExpired(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	return reapCounted(ctx, db, d, d.Reap().FreeExpired, p)
}

func (d postgres) reapWaiters(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	return reapCounted(ctx, db, d, d.Reap().DeleteWaiters, p, p.Age.Microseconds())
}

func (d postgres) reapIdle(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	return reapCounted(ctx, db, d, d.Reap().DeleteIdle, p, p.Age.Microseconds())
}

// checkFloor: PostgreSQL has no fencing floor.
func (postgres) checkFloor(context.Context, *DB) error { return nil }

// reapCount runs a one-statement batch (limit first, then args) that
// answers its row count in one row.
func (postgres) reapCount(ctx context.Context, db *DB, query string, limit int, args ...any) (int, error) {
	var n int64
	if err := db.QueryRowxContext(ctx, query, append([]any{limit}, args...)...).Scan(&n); err != nil {
		return 0, db.Classify(err)
	}
	return int(n), nil
}
