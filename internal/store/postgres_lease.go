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
	return db.pgAcquire(ctx, db.DB, db.Dialect.Queue().Direct, p, true)
}

// pgAcquire runs one of PostgreSQL's acquire statements, the lease's or,
// with queued, the queue's direct one (which also returns the number of live
// waiters and, when no row exists, a row of zeroes), and reads its answer.
// pgAcquireRow is what the acquire statement returns, in one allocation
// (each variable scanned into would otherwise escape on its own).
type pgAcquireRow struct {
	res                      AcquireResult
	owner, mode, next        string
	version, expUs, nowUs, n int64
	sinceUs, untilUs         int64
	dest                     [11]any
	args                     [6]any
}

func (db *DB) pgAcquire(ctx context.Context, q Querier, query string, p AcquireParams, queued bool) (AcquireResult, error) {
	r := &pgAcquireRow{}
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

// fields are the destinations of an acquire statement's columns, the
// eleventh last (the queue's direct acquire: the live waiters; the take of
// the queue's head: whether the waiter was live).
func (r *pgAcquireRow) fields(last any) []any {
	r.dest = [11]any{&r.res.Acquired, &r.version, &r.owner, &r.mode, &r.expUs, &r.nowUs, &r.res.Reentry,
		&r.next, &r.sinceUs, &r.untilUs, last}
	return r.dest[:]
}

// bind is the acquire statements' arguments ($1 to $5) and extra after them.
func (r *pgAcquireRow) bind(p AcquireParams, extra ...any) []any {
	r.args = [6]any{p.Name, p.Owner, ttlArg(p.TTL), modeArg(p.Mode), nullString(p.Metadata)}
	return append(r.args[:5], extra...)
}

// result reads the row of an acquire statement (with queued, the queue's
// direct one's, whose eleventh column counts the live waiters).
func (r *pgAcquireRow) result(p AcquireParams, queued bool) AcquireResult {
	res, owner, mode, version, expUs, nowUs, n := r.res, r.owner, r.mode, r.version, r.expUs, r.nowUs, r.n
	if res.Acquired {
		res.Token = dblock.Token(version)
		return res
	}
	res.Waiters = int(n)
	h := Holder{Exists: !queued || version != 0, Owner: owner, Version: version, Mode: mode, Now: Micros(nowUs)}
	if expUs != 0 {
		h.ExpiresAt = Micros(expUs)
	}
	h.Next = reservationOf(r.next, r.sinceUs, r.untilUs)
	reserved := h.ReservedFor(p.Owner) && !(owner == p.Owner && h.Held())
	if h.Exists && n == 0 && !reserved && (owner == "" && !h.Held() || owner == p.Owner || expUs <= nowUs) {
		// Takeable (not kept for another's reservation), nobody queued,
		// yet skipped: a transaction holds the row locked.
		h = Holder{Exists: true, Mode: dblock.ModePessimistic, Now: h.Now}
	}
	res.Holder = h
	return res
}

func (postgres) renewLease(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return db.execOne(ctx, q, db.Dialect.Lease().Renew, name, owner, int64(token), ttl.Microseconds())
}

func (d postgres) proclaim(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, metadata string) (bool, error) {
	return db.execOne(ctx, q, d.Lease().Proclaim, name, owner, int64(token), nullString(metadata))
}
