package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
)

// SQLite's lease engine: one writer at a time, so a statement on the pool
// waits for the write lock sqliteLeaseBusyTimeout at most, and a database
// held by a pessimistic transaction answers "busy", read as that holder.

func (d sqliteDialect) acquireLease(ctx context.Context, db *DB, q Querier, p AcquireParams) (AcquireResult, error) {
	return db.sqliteAcquire(ctx, q, d.Lease().Acquire, p, func() (AcquireResult, error) {
		h, err := db.LeaseHolder(ctx, q, p.Name)
		return AcquireResult{Holder: h}, err
	})
}

// takeFree: SQLite has no TakeFree.
func (sqliteDialect) takeFree(context.Context, *DB, AcquireParams) (AcquireResult, freeTake, error) {
	return AcquireResult{}, takeSkipped, nil
}

func (d sqliteDialect) acquireGuarded(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, error) {
	return db.sqliteAcquire(ctx, db, d.Queue().Direct, p, func() (AcquireResult, error) {
		// Queued for, or held by another: say which.
		s, err := db.PeekQueue(ctx, nil, p.Name)
		return AcquireResult{Holder: s.Holder, Waiters: s.Ahead, Statements: 2}, err
	})
}

// sqliteAcquire runs query, an acquire statement answering (version,
// reentry) when it took the name and no row when it did not, on q (on the
// pool with a short busy timeout); notTaken says why when it did not.
func (db *DB) sqliteAcquire(ctx context.Context, q Querier, query string, p AcquireParams, notTaken func() (AcquireResult, error)) (AcquireResult, error) {
	var (
		res     AcquireResult
		version int64
	)
	args := []any{p.Name, p.Owner, ttlArg(p.TTL), modeArg(p.Mode), nullString(p.Metadata)}
	var err error
	if db.onPool(q) {
		err = db.sqliteShortBusy(ctx, func(c *sqlx.Conn) error {
			return c.QueryRowxContext(ctx, query, args...).Scan(&version, &res.Reentry)
		})
	} else {
		err = q.QueryRowxContext(ctx, query, args...).Scan(&version, &res.Reentry)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return notTaken()
	case err != nil:
		err = db.Classify(err)
		if errors.Is(err, dblock.ErrNotAcquired) {
			return AcquireResult{Holder: Holder{Exists: true, Mode: dblock.ModePessimistic}}, nil
		}
		return AcquireResult{}, err
	}
	res.Acquired, res.Token = true, dblock.Token(version)
	return res, nil
}

func (d sqliteDialect) renewLease(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return db.execOne(ctx, q, d.Lease().Renew, name, owner, int64(token), ttl.Microseconds())
}

func (d sqliteDialect) proclaim(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, metadata string) (bool, error) {
	return db.execOne(ctx, q, d.Lease().Proclaim, name, owner, int64(token), nullString(metadata))
}
