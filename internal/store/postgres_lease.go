package store

import (
	"context"
	"time"

	"github.com/dblock-go/dblock"
)

// PostgreSQL's lease engine: the acquire answers in one row, with the
// holder it found when it took nothing, or (the fair queue's direct
// acquire) the waiters ahead.

func (postgres) acquireLease(ctx context.Context, db *DB, q Querier, p AcquireParams) (AcquireResult, error) {
	return db.acquireAnswered(ctx, q, db.Dialect.Lease().Acquire, p, false)
}

func (postgres) acquireGuarded(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, error) {
	return db.acquireAnswered(ctx, db, db.Dialect.Queue().Direct, p, true)
}

func (postgres) renewLease(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return db.execOne(ctx, q, db.Dialect.Lease().Renew, name, owner, int64(token), ttl.Microseconds())
}

func (d postgres) proclaim(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, metadata string) (bool, error) {
	return db.execOne(ctx, q, d.Lease().Proclaim, name, owner, int64(token), nullString(metadata))
}
