package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
)

// MySQL's and MariaDB's lease engine: the acquisition that reads the
// fencing floor without waiting for it, the fair queue's guard in three
// statements, and the renewal's argument order.

func (mysqlDialect) acquireLease(ctx context.Context, db *DB, q Querier, p AcquireParams) (AcquireResult, error) {
	return db.acquireMySQL(ctx, q, p)
}

// acquireGuarded: no statement can both check the queue and acquire without
// waiting, so it looks at the queue (unless p.QueueQuiet), acquires, and
// gives the name back if a waiter queued before the acquisition began
// (QueueSQL.Jumped).
func (mysqlDialect) acquireGuarded(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, error) {
	statements := 0
	if !p.QueueQuiet {
		// A lockless look first: under contention the answer is almost
		// always "queued" or "held", for one statement.
		s, err := db.PeekQueue(ctx, nil, p.Name)
		if err != nil {
			return AcquireResult{}, err
		}
		mine := s.Holder.Held() && s.Holder.Owner == p.Owner
		if !mine && (s.Ahead > 0 || s.Holder.Held()) {
			return AcquireResult{Holder: s.Holder, Waiters: s.Ahead}, nil
		}
		statements++
	}
	p.QueueGuard = false
	res, err := db.acquireLease(ctx, nil, p)
	res.Statements = max(res.Statements, 1) + statements
	if err != nil || !res.Acquired {
		return res, err
	}
	// Jumped: did a waiter queue before this acquisition began?
	var reentry, queued int
	res.Statements++
	err = db.QueryRowxContext(ctx, db.Dialect.Queue().Jumped, p.Name, p.Owner, int64(res.Token)).Scan(&reentry, &queued)
	if err != nil || reentry > 1 || queued == 0 {
		// Unreadable (the lease stands: its keeper finds out whether it
		// still holds), a reentry, or nobody jumped.
		return res, nil
	}
	res.Statements++
	released, rerr := db.ReleaseLease(ctx, nil, p.Name, p.Owner, res.Token)
	if rerr != nil || !released {
		// Keep the lease rather than leave it held by nobody who knows.
		return res, nil
	}
	return AcquireResult{Waiters: queued, Statements: res.Statements}, nil
}

func (d mysqlDialect) renewLease(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return db.execOne(ctx, q, d.Lease().Renew, ttl.Microseconds(), name, owner, int64(token))
}

func (d mysqlDialect) proclaim(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, metadata string) (bool, error) {
	return db.execOne(ctx, q, d.Lease().Proclaim, nullString(metadata), name, owner, int64(token))
}

// acquireMySQL is AcquireLease on MySQL/MariaDB. A name with no row whose
// key another transaction holds locked is free, not held: the lock is a
// brief one (another acquisition inserting the same name, a reaper batch
// deleting idle neighbours, a gap lock of a locking read), so the statement
// is run again, with the fence retries' pauses, for up to keyLockedMax; only
// then is it refused, with ErrKeyLocked as the reason.
func (db *DB) acquireMySQL(ctx context.Context, q Querier, p AcquireParams) (AcquireResult, error) {
	attempt := db.mysqlAcquireAttempt(ctx, q, p)
	var first time.Time
	pause := fenceRetryMin
	for {
		n, id, err := db.retryFenced(ctx, q, attempt)
		if err == nil {
			return mysqlAcquired(ctx, db, q, p.Name, n, id)
		}
		err = db.Classify(err)
		if errors.Is(err, ErrFenceBusy) {
			return AcquireResult{Holder: Holder{Reason: ErrFenceBusy}}, nil
		}
		if !errors.Is(err, dblock.ErrNotAcquired) {
			return AcquireResult{}, err
		}
		// A transaction holds the name's row or key (the fence read skips
		// locks, so the wait was not for the floor).
		h := db.lockedHolder(ctx, q, p.Name)
		if h.Reason != ErrKeyLocked {
			return AcquireResult{Holder: h}, nil
		}
		if first.IsZero() {
			first = time.Now()
		} else if time.Since(first) >= keyLockedMax {
			return AcquireResult{Holder: h}, nil
		}
		if err := sleepCtx(ctx, backoff.Jitter(pause)); err != nil {
			return AcquireResult{}, err
		}
		pause = min(2*pause, fenceRetryMax)
	}
}

// mysqlAcquireAttempt returns one try of the acquire statement for
// retryFenced: Acquire on its own, or FloorInTx then AcquireInTx inside a
// transaction (see LeaseSQL.FloorInTx).
func (db *DB) mysqlAcquireAttempt(ctx context.Context, q Querier, p AcquireParams) fencedAttempt {
	s := db.Dialect.Lease()
	ttl, md := p.TTL.Microseconds(), nullString(p.Metadata)
	if _, inTx := q.(*sqlx.Tx); !inTx {
		return func() (sql.Result, error) { return q.ExecContext(ctx, s.Acquire, p.Name, p.Owner, p.Mode, ttl, md) }
	}
	return func() (sql.Result, error) {
		var floor int64
		if err := q.QueryRowxContext(ctx, s.FloorInTx).Scan(&floor); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil, nil // The floor's row is locked: skipped.
			}
			return nil, err
		}
		return q.ExecContext(ctx, s.AcquireInTx, p.Name, p.Owner, floor, p.Mode, ttl, md)
	}
}

// mysqlAcquired reads the acquire statement's OK packet: affected rows 1
// (inserted) or 2 (taken or re-entered) and the token as insert id, or 0
// rows when another owner holds the name.
func mysqlAcquired(ctx context.Context, db *DB, q Querier, name string, n, id int64) (AcquireResult, error) {
	if n == 0 {
		h, err := db.LeaseHolder(ctx, q, name)
		return AcquireResult{Holder: h, Statements: 2}, err
	}
	res := AcquireResult{Acquired: true, Token: dblock.Token(id)}
	if n == 1 {
		res.Reentry = 1 // Inserted; an update does not report the count.
	}
	return res, nil
}

// lockedHolder describes the holder of a name whose row or key another
// transaction holds locked (MySQL): the lease holder when the row names one,
// else a pessimistic holder when the row exists (a transaction holding the
// row is what a pessimistic lock is), else an insert of the same name in
// progress.
func (db *DB) lockedHolder(ctx context.Context, q Querier, name string) Holder {
	h, err := db.LeaseHolder(ctx, q, name)
	switch {
	case err == nil && h.Held():
		return h
	case err == nil && h.Exists:
		return Holder{Exists: true, Mode: dblock.ModePessimistic, Version: h.Version, Now: h.Now}
	default:
		return Holder{Reason: ErrKeyLocked}
	}
}

// execFenced runs an INSERT ... SELECT ... FROM dblock_fence ... SKIP LOCKED
// statement whose every effective outcome evaluates LAST_INSERT_ID(expr) with
// a positive value (MySQL). When the statement did nothing and reports insert
// id 0, the fence row was locked (a raise of the floor in progress), and it
// is run again after a short pause, up to fenceBusyMax (then an error
// wrapping ErrFenceBusy and dblock.ErrNotAcquired). A missing fence row is an
// error wrapping dblock.ErrSchemaMissing. It returns the affected rows and
// the insert id; errors are unclassified driver errors, except those two.
func (db *DB) execFenced(ctx context.Context, q Querier, query string, args ...any) (affected, id int64, err error) {
	return db.retryFenced(ctx, q, func() (sql.Result, error) { return q.ExecContext(ctx, query, args...) })
}

// retryFenced runs attempt until it did not skip the floor's row, with the
// pauses and bounds execFenced documents.
func (db *DB) retryFenced(ctx context.Context, q Querier, attempt fencedAttempt) (affected, id int64, err error) {
	var first time.Time
	pause := fenceRetryMin
	for {
		r, err := attempt()
		if err != nil {
			return 0, 0, err
		}
		if r != nil {
			if affected, err = r.RowsAffected(); err != nil {
				return 0, 0, err
			}
			if id, err = r.LastInsertId(); err != nil {
				return 0, 0, err
			}
			if affected != 0 || id != 0 {
				return affected, id, nil
			}
		}
		if first.IsZero() {
			first = time.Now()
			var one int
			err := q.QueryRowxContext(ctx, "SELECT 1 FROM dblock_fence WHERE id = 1").Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, 0, schemaMissing(db.Dialect, errors.New("dblock_fence has no row with id 1"))
			}
			if err != nil {
				return 0, 0, err
			}
		} else if time.Since(first) >= fenceBusyMax {
			return 0, 0, fmt.Errorf("%w: %w", dblock.ErrNotAcquired, ErrFenceBusy)
		}
		if err := sleepCtx(ctx, backoff.Jitter(pause)); err != nil {
			return 0, 0, err
		}
		pause = min(2*pause, fenceRetryMax)
	}
}

// keyLockedMax bounds how long an acquisition of a name without a row waits
// for another transaction's lock on its key (see acquireMySQL).
const keyLockedMax = 500 * time.Millisecond

// Bounds of the retries of a statement that found the fencing floor's row
// locked (MySQL): the first retry comes after fenceRetryMin, the pause
// doubles up to fenceRetryMax, and after fenceBusyMax the statement gives up
// with ErrFenceBusy. A reaper raise holds the row for one statement, so the
// first retry almost always succeeds.
const (
	fenceRetryMin = 50 * time.Microsecond
	fenceRetryMax = 5 * time.Millisecond
	fenceBusyMax  = 200 * time.Millisecond
)

// fencedAttempt is one try of a statement that reads the fencing floor with
// a skip-locked lock: its result, or a nil result when the floor's row was
// locked and skipped before the statement ran.
type fencedAttempt func() (sql.Result, error)
