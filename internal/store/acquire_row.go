package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dblock-go/dblock"
)

// acquireRow is what an acquire statement answers in one row (PostgreSQL's
// acquire statements, MariaDB's take of a fair queue's head and its direct
// acquire), in one allocation (each variable scanned into would otherwise
// escape on its own).
type acquireRow struct {
	res                      AcquireResult
	owner, mode, next        string
	version, expUs, nowUs, n int64
	sinceUs, untilUs         int64
	dest                     [11]any
	args                     [6]any
}

// fields are the destinations of an acquire statement's columns, the
// eleventh last (the queue's direct acquire: the live waiters; the take of
// the queue's head: whether the waiter was live).
func (r *acquireRow) fields(last any) []any {
	r.dest = [11]any{&r.res.Acquired, &r.version, &r.owner, &r.mode, &r.expUs, &r.nowUs, &r.res.Reentry,
		&r.next, &r.sinceUs, &r.untilUs, last}
	return r.dest[:]
}

// bind is the acquire statements' arguments ($1 to $5) and extra after them.
func (r *acquireRow) bind(p AcquireParams, extra ...any) []any {
	r.args = [6]any{p.Name, p.Owner, ttlArg(p.TTL), modeArg(p.Mode), nullString(p.Metadata)}
	return append(r.args[:5], extra...)
}

// result reads the row of an acquire statement (with queued, the queue's
// direct one's, whose eleventh column counts the live waiters).
func (r *acquireRow) result(p AcquireParams, queued bool) AcquireResult {
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

// acquireAnswered runs an acquire statement that answers in one row
// (acquireRow): one of PostgreSQL's, the lease's or, with queued, the
// queue's direct one (which also returns the number of live waiters and,
// when no row exists, a row of zeroes), or MariaDB's direct call (queued),
// and reads its answer.
func (db *DB) acquireAnswered(ctx context.Context, q Querier, query string, p AcquireParams, queued bool) (AcquireResult, error) {
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
