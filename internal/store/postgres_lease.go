package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/dblock-go/dblock"
)

// PostgreSQL's lease engine: the acquire answers in one row, with the
// holder it found when it took nothing, or (the fair queue's direct
// acquire) the waiters ahead.

func (postgres) acquireLease(ctx context.Context, db *DB, q Querier, p AcquireParams) (AcquireResult, error) {
	return db.pgAcquire(ctx, q, db.Dialect.Lease().Acquire, p, false)
}

func (postgres) acquireGuarded(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, error) {
	return db.pgAcquire(ctx, db, db.Dialect.Queue().Direct, p, true)
}

// pgAcquire runs one of PostgreSQL's acquire statements, the lease's or,
// with queued, the queue's direct one (which also returns the number of live
// waiters and, when no row exists, a row of zeroes), and reads its answer.
func (db *DB) pgAcquire(ctx context.Context, q Querier, query string, p AcquireParams, queued bool) (AcquireResult, error) {
	r := &acquireRow{}
	dest := r.fields(&r.n)
	if !queued {
		dest = dest[:10]
	}
	err := db.queryRow(ctx, q, query, r.bind(p), dest...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return AcquireResult{}, nil // Nothing taken and no row visible: a concurrent insert of the name won.
	case err != nil:
		err = db.Classify(err)
		if errors.Is(err, dblock.ErrNotAcquired) {
			return AcquireResult{Holder: Holder{Exists: true, Mode: dblock.ModePessimistic}}, nil
		}
		return AcquireResult{}, err
	}
	return r.result(p, queued), nil
}

func (postgres) renewLease(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return db.execOne(ctx, q, db.Dialect.Lease().Renew, name, owner, int64(token), ttl.Microseconds())
}

func (d postgres) proclaim(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, metadata string) (bool, error) {
	return db.execOne(ctx, q, d.Lease().Proclaim, name, owner, int64(token), nullString(metadata))
}
