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
// fencing floor without waiting for it, the fair queue's guard (one call on
// MariaDB, three statements elsewhere), and the renewal's argument order.

func (mysqlDialect) acquireLease(ctx context.Context, db *DB, q Querier, p AcquireParams) (AcquireResult, error) {
	return db.acquireMySQL(ctx, q, p)
}

// acquireGuarded: on MariaDB one call (QueueSQL.Direct, the procedure of
// MySQL migration 00027) reads the queue and acquires unless a waiter
// queues. Where there is no such call (MySQL 8), or the server refuses it
// (a schema or grants from before the migration: the call did nothing),
// it takes three statements (guardedInThree).
func (mysqlDialect) acquireGuarded(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, error) {
	if q := db.Dialect.Queue().Direct; q != "" && !db.noDirect.Load() {
		res, err := db.acquireAnswered(ctx, db, q, p, true)
		if !ProcedureRefused(err) {
			res.Statements = 1
			return res, err
		}
		db.noDirect.Store(true) // From now on (also when a concurrent call got there first).
	}
	return db.guardedInThree(ctx, p)
}

// guardedInThree is acquireGuarded where no statement can both check the
// queue and acquire without waiting: it looks at the queue (unless
// p.QueueQuiet), acquires, and gives the name back if a waiter queued
// before the acquisition began (QueueSQL.Jumped).
func (db *DB) guardedInThree(ctx context.Context, p AcquireParams) (AcquireResult, error) {
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
	return lockedCAS(ctx, db, q, name, d.Lease().Renew, ttl.Microseconds(), name, owner, int64(token))
}

func (d mysqlDialect) proclaim(ctx context.Context, db *DB, q Querier, name, owner string, token dblock.Token, metadata string) (bool, error) {
	return lockedCAS(ctx, db, q, name, d.Lease().Proclaim, nullString(metadata), name, owner, int64(token))
}

// lockedCAS runs a lease's CAS update (query, args) after locking name's
// row, in q's transaction, or in a transaction of its own begun on q (the
// pool or a connection). The update's clock (UTC_TIMESTAMP) is its
// statement's start: run alone, it could wait for another transaction's
// lock (a pessimistic holder that took the name once the lease ran out) and
// then pass on a clock read before the wait, renewing the lease after the
// other holder's section. Locked first, the update waits for nothing and
// reads the clock after the lock.
//
// A transaction of its own that the server ends as a deadlock victim (seen
// with a reaper's batch freeing expired rows at the same time) runs again,
// up to casAttempts times.
func lockedCAS(ctx context.Context, db *DB, q Querier, name, query string, args ...any) (bool, error) {
	b, ok := q.(txBeginner)
	if !ok {
		return casLocked(ctx, db, q, name, query, args)
	}
	for attempt := 1; ; attempt++ {
		ok, err := casInTx(ctx, db, b, name, query, args)
		if !errors.Is(err, dblock.ErrDeadlock) || attempt == casAttempts {
			return ok, err
		}
		if err := sleepCtx(ctx, backoff.Jitter(time.Duration(attempt)*2*time.Millisecond)); err != nil {
			return false, err
		}
	}
}

// casAttempts bounds lockedCAS's runs in transactions of its own.
const casAttempts = 5

// txBeginner is a Querier that can begin a transaction: the pool or a
// connection (a *sqlx.Tx cannot).
type txBeginner interface {
	BeginTxx(ctx context.Context, opts *sql.TxOptions) (*sqlx.Tx, error)
}

// casInTx is casLocked in a transaction of its own begun on b (on a
// connection of its own when b is the pool: BeginPinned).
func casInTx(ctx context.Context, db *DB, b txBeginner, name, query string, args []any) (bool, error) {
	tx, end, err := beginOwnTx(ctx, b)
	if err != nil {
		return false, db.Classify(err)
	}
	defer end()
	ok, err := casLocked(ctx, db, tx, name, query, args)
	if err != nil {
		return false, err
	}
	return ok, db.Classify(tx.Commit())
}

// beginOwnTx begins a transaction on b: beginPinnedOn where b is the pool,
// on b itself where it is a connection.
func beginOwnTx(ctx context.Context, b txBeginner) (*sqlx.Tx, func(), error) {
	if p, ok := b.(pool); ok {
		return beginPinnedOn(ctx, p, nil)
	}
	tx, err := b.BeginTxx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	return tx, func() { _ = tx.Rollback() }, nil
}

// casLocked locks name's row in tx, then runs the CAS update.
func casLocked(ctx context.Context, db *DB, tx Querier, name, query string, args []any) (bool, error) {
	var one int
	err := tx.QueryRowxContext(ctx, mysqlLockName, name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, db.Classify(err)
	}
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return false, db.Classify(err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// acquireMySQL is AcquireLease on MySQL/MariaDB. A name with no row whose
// key another transaction holds locked is free, not held: the lock is a
// brief one (another acquisition inserting the same name, a reaper batch
// deleting idle neighbours, a gap lock of a locking read), so the statement
// is run again, with the fence retries' pauses, for up to keyLockedMax; only
// then is it refused, with ErrKeyLocked as the reason.
func (db *DB) acquireMySQL(ctx context.Context, q Querier, p AcquireParams) (AcquireResult, error) {
	a := &mysqlAcquisition{ctx: ctx, db: db, q: q, p: p}
	return a.acquire()
}

// acquire runs the upsert (Acquire, or AcquireInTx in a transaction) until
// it ran, telling a busy row's holder.
func (a *mysqlAcquisition) acquire() (AcquireResult, error) {
	db, ctx, q, p := a.db, a.ctx, a.q, a.p
	var first time.Time
	pause := fenceRetryMin
	for {
		err := db.retryFenced(ctx, q, a.try)
		if err == nil {
			return a.result()
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

// mysqlAcquisition is one AcquireLease on MySQL or MariaDB: the statement
// (try, which retryFenced runs again while the floor's row is skipped) and
// what its last run reported. The statement reports through the OK packet:
// affected rows and the token as insert id. A trigger on dblock_locks (the
// history's, MariaDB only) zeroes that insert id whenever it fires, that is
// on every update of an existing row: the row's token is then read by its
// owner, or, while a trigger was seen lately, the statement returns the row
// itself (RETURNING), which survives the trigger and names the holder when
// another owner has the name.
type mysqlAcquisition struct {
	ctx context.Context
	db  *DB
	q   Querier
	p   AcquireParams

	returning    bool     // MariaDB's RETURNING form (see returningAcquire)
	affected, id int64    // The OK packet, when not returning.
	row          rowLease // The returned row, when returning.
	held         *Holder  // Another owner's hold, read after an OK packet of 0 and 0.
}

// rowLease is a lease row as RETURNING (MariaDB) reads it.
type rowLease struct {
	owner, mode, next string
	version, reentry  int64
	expiresUs, nowUs  int64
	sinceUs, untilUs  int64
}

// statement returns the acquire statement and its arguments: Acquire on its
// own, or inside a transaction AcquireInTx after reading the floor with
// FloorInTx (see LeaseSQL.FloorInTx), which reports skipped when the
// floor's row is locked.
func (a *mysqlAcquisition) statement() (query string, args []any, skipped bool, err error) {
	s := a.db.Dialect.Lease()
	ttl, md, mode := ttlArg(a.p.TTL), nullString(a.p.Metadata), modeArg(a.p.Mode)
	a.returning = a.db.MariaDB() && a.db.returningAcquire()
	if _, inTx := a.q.(*sqlx.Tx); !inTx {
		query = s.Acquire
		if a.returning {
			query = s.AcquireReturning
		}
		return query, []any{a.p.Name, a.p.Owner, mode, ttl, md}, false, nil
	}
	var floor int64
	if err := a.q.QueryRowxContext(a.ctx, s.FloorInTx).Scan(&floor); err != nil {
		return "", nil, errors.Is(err, sql.ErrNoRows), ignoreNoRows(err)
	}
	query = s.AcquireInTx
	if a.returning {
		query = s.AcquireInTxReturning
	}
	return query, []any{a.p.Name, a.p.Owner, floor, mode, ttl, md}, false, nil
}

// try runs the statement once; ran is false when it skipped the floor's row
// and did nothing.
func (a *mysqlAcquisition) try() (ran bool, err error) {
	query, args, skipped, err := a.statement()
	if skipped || err != nil {
		return false, err
	}
	if a.returning {
		err := a.db.queryRow(a.ctx, a.q, query, args, &a.row.owner, &a.row.version, &a.row.reentry,
			&a.row.mode, &a.row.expiresUs, &a.row.nowUs, &a.row.next, &a.row.sinceUs, &a.row.untilUs)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	}
	r, err := a.db.exec(a.ctx, a.q, query, args...)
	if err != nil {
		return false, err
	}
	if a.affected, err = r.RowsAffected(); err != nil {
		return false, err
	}
	if a.id, err = r.LastInsertId(); err != nil {
		return false, err
	}
	if a.affected == 0 && a.id == 0 && a.db.MariaDB() {
		return a.heldOrSkipped()
	}
	return a.affected != 0 || a.id != 0, nil
}

// heldOrSkipped tells apart the two statements that report 0 rows and
// insert id 0 on MariaDB: one that skipped the floor's row (run it again),
// and a refusal that fired a trigger (another owner holds the name).
func (a *mysqlAcquisition) heldOrSkipped() (ran bool, err error) {
	h, err := a.db.LeaseHolder(a.ctx, a.q, a.p.Name)
	if err != nil || !h.Held() || h.Owner == a.p.Owner {
		return false, err
	}
	a.held = &h
	return true, nil
}

// result reads the last run.
func (a *mysqlAcquisition) result() (AcquireResult, error) {
	switch {
	case a.returning:
		return a.row.result(a.p.Owner), nil
	case a.held != nil:
		return AcquireResult{Holder: *a.held, Statements: 2}, nil
	case a.affected == 0:
		h, err := a.db.LeaseHolder(a.ctx, a.q, a.p.Name)
		return AcquireResult{Holder: h, Statements: 2}, err
	case a.id == 0:
		return a.ownedToken()
	}
	res := AcquireResult{Acquired: true, Token: dblock.Token(a.id), Statements: 1}
	if a.affected == 1 {
		res.Reentry = 1 // Inserted; an update does not report the count.
	}
	return res, nil
}

// result is the outcome for owner of an acquisition that returned r.
// (A row left the owner's with its lease expired is one a reservation
// kept from it: not taken.)
func (r rowLease) result(owner string) AcquireResult {
	if r.owner == owner && r.expiresUs > r.nowUs {
		return AcquireResult{Acquired: true, Token: dblock.Token(r.version), Reentry: int(r.reentry), Statements: 1}
	}
	h := Holder{Exists: true, Owner: r.owner, Version: r.version, Mode: r.mode, Reentry: int(r.reentry), Now: Micros(r.nowUs)}
	if r.expiresUs != 0 {
		h.ExpiresAt = Micros(r.expiresUs)
	}
	h.Next = reservationOf(r.next, r.sinceUs, r.untilUs)
	return AcquireResult{Holder: h, Statements: 1}
}

// ownedToken reads the token of an acquisition whose insert id a trigger
// hid, and remembers the trigger (the next acquisitions read their row).
func (a *mysqlAcquisition) ownedToken() (AcquireResult, error) {
	a.db.history.noteTrigger(true)
	var version, reentry int64
	err := a.q.QueryRowxContext(a.ctx, a.db.Dialect.Lease().OwnedToken, a.p.Name, a.p.Owner).Scan(&version, &reentry)
	if errors.Is(err, sql.ErrNoRows) {
		// Taken from us in between (forced): not ours any more.
		h, err := a.db.LeaseHolder(a.ctx, a.q, a.p.Name)
		return AcquireResult{Holder: h, Statements: 3}, err
	}
	if err != nil {
		return AcquireResult{}, a.db.Classify(err)
	}
	return AcquireResult{Acquired: true, Token: dblock.Token(version), Reentry: int(reentry), Statements: 2}, nil
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
// a positive value (MySQL 8), or, on MariaDB, returns a row (RETURNING).
// When the statement did nothing (insert id 0 and no affected row, or no row
// returned), the fence row was locked (a raise of the floor in progress), and
// it is run again after a short pause, up to fenceBusyMax (then an error
// wrapping ErrFenceBusy and dblock.ErrNotAcquired). A missing fence row is an
// error wrapping dblock.ErrSchemaMissing. Other errors are unclassified
// driver errors.
func (db *DB) execFenced(ctx context.Context, q Querier, query string, args ...any) error {
	return db.retryFenced(ctx, q, func() (bool, error) {
		if db.MariaDB() {
			var one int64
			err := q.QueryRowxContext(ctx, query, args...).Scan(&one)
			return err == nil, ignoreNoRows(err)
		}
		r, err := q.ExecContext(ctx, query, args...)
		if err != nil {
			return false, err
		}
		affected, err := r.RowsAffected()
		if err != nil {
			return false, err
		}
		id, err := r.LastInsertId()
		return affected != 0 || id != 0, err
	})
}

// ignoreNoRows is err, except nil for sql.ErrNoRows.
func ignoreNoRows(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

// retryFenced runs attempt until it did not skip the floor's row, with the
// pauses and bounds execFenced documents.
func (db *DB) retryFenced(ctx context.Context, q Querier, attempt fencedAttempt) error {
	var first time.Time
	pause := fenceRetryMin
	for {
		ran, err := attempt()
		if err != nil || ran {
			return err
		}
		if first.IsZero() {
			first = time.Now()
			var one int
			err := q.QueryRowxContext(ctx, "SELECT 1 FROM dblock_fence WHERE id = 1").Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return schemaMissing(db.Dialect, errors.New("dblock_fence has no row with id 1"))
			}
			if err != nil {
				return err
			}
		} else if time.Since(first) >= fenceBusyMax {
			return fmt.Errorf("%w: %w", dblock.ErrNotAcquired, ErrFenceBusy)
		}
		if err := sleepCtx(ctx, backoff.Jitter(pause)); err != nil {
			return err
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
// a skip-locked lock: ran is false when the floor's row was locked and
// skipped, and the statement did nothing.
type fencedAttempt func() (ran bool, err error)
