package store

import (
	"context"
	"fmt"
)

// SharedReapSQL holds the reaper's statements for shared locks: each
// deletes up to a limit of rows (limit last) past an age (µs, first).
type SharedReapSQL struct {
	// DeleteShares deletes readers' shares expired longer than the age ago
	// whose period ended (the name's row no longer holds them); the shares
	// of a period that still holds the name go with it.
	DeleteShares string
	// DeleteGrants deletes semaphore grants expired longer than the age
	// ago (their permits were free from their expiry on).
	DeleteGrants string
	// DeleteSemaphores deletes semaphores unchanged for the age and with
	// no grant left; the next Acquire creates one again with its limit.
	DeleteSemaphores string
}

// ReapShares deletes a batch of expired shares (p.Age past their expiry).
func (db *DB) ReapShares(ctx context.Context, p ReapParams) (ReapResult, error) {
	return db.reapBatch(ctx, "delete expired shares", db.Dialect.SharedReap().DeleteShares, p)
}

// ReapGrants deletes a batch of expired semaphore grants.
func (db *DB) ReapGrants(ctx context.Context, p ReapParams) (ReapResult, error) {
	return db.reapBatch(ctx, "delete expired grants", db.Dialect.SharedReap().DeleteGrants, p)
}

// ReapSemaphores deletes a batch of idle semaphores (p.Age: the retention).
func (db *DB) ReapSemaphores(ctx context.Context, p ReapParams) (ReapResult, error) {
	return db.reapBatch(ctx, "delete idle semaphores", db.Dialect.SharedReap().DeleteSemaphores, p)
}

// reapBatch runs one delete of up to p.Limit rows older than p.Age.
func (db *DB) reapBatch(ctx context.Context, what, query string, p ReapParams) (ReapResult, error) {
	res, err := db.ExecContext(ctx, query, p.Age.Microseconds(), p.Limit)
	if err != nil {
		return ReapResult{}, fmt.Errorf("%s: %w", what, db.Classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ReapResult{}, fmt.Errorf("%s: %w", what, db.Classify(err))
	}
	return ReapResult{Rows: int(n), More: int(n) == p.Limit}, nil
}
