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

// Lease statements of MySQL and MariaDB, and the acquisition that reads the
// fencing floor without waiting for it.

const myUsEpoch = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', %s)"

func myUs(col string) string { return fmt.Sprintf(myUsEpoch, col) }

// mysqlAcquire reports through the OK packet: affected rows 1 (inserted) or 2
// (taken or re-entered) mean acquired, 0 means held by another; the token is
// the LAST_INSERT_ID(expr) value. ON DUPLICATE KEY UPDATE assigns left to
// right with the new values visible, so every column that tests the old owner
// or expiry comes before owner, and owner before expires_at and updated_at.
//
// The fencing floor. A new row's first token is dblock_fence.floor + 1, and
// the reaper raises the floor (in a statement of its own, committed before it
// deletes any row) to at least the version of every row it deletes. The
// floor is read with a shared lock, so the read returns the latest committed
// floor and a raise cannot commit while an acquisition that read the old
// floor is still running: an insert of a deleted name always sees the raise
// that preceded the delete. (A consistent, lockless read would not: a
// statement whose snapshot predates the raise could wait for the deleting
// transaction's row lock and then insert below the floor. InnoDB reads a
// scalar subquery of INSERT ... VALUES with a shared lock anyway, at every
// isolation level.) SKIP LOCKED makes the read never wait: while a raise
// holds (or waits for) the fence row, the SELECT produces no row and the
// statement does nothing, reported as affected rows 0 with insert id 0 (every
// other outcome evaluates LAST_INSERT_ID(expr) with a positive token), and
// AcquireLease tries again a moment later. A raise holds the row for one
// short statement, so foreground acquisitions never wait for a reaper pass.
//
// MySQL 8 skips a locked row after FOR SHARE only, MariaDB (10.6+) after
// LOCK IN SHARE MODE only: the statements differ in that clause.
const mysqlAcquire = `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
SELECT ?, ?, 1, LAST_INSERT_ID(f.floor + 1), ?,
       UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?
FROM dblock_fence f WHERE f.id = 1 FOR SHARE SKIP LOCKED
` + mysqlAcquireUpdate

// mariadbAcquire is mysqlAcquire in MariaDB's words.
const mariadbAcquire = `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
SELECT ?, ?, 1, LAST_INSERT_ID(f.floor + 1), ?,
       UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?
FROM dblock_fence f WHERE f.id = 1 LOCK IN SHARE MODE SKIP LOCKED
` + mysqlAcquireUpdate

// mysqlAcquireUpdate is the takeover or re-entry of an existing row, shared
// by mysqlAcquire, mariadbAcquire and mysqlAcquireValues.
const mysqlAcquireUpdate = `ON DUPLICATE KEY UPDATE
    reentry     = IF(owner = VALUES(owner) AND expires_at > UTC_TIMESTAMP(6), reentry + 1,
                     IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), 1, reentry)),
    version     = LAST_INSERT_ID(IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), GREATEST(version + 1, VALUES(version)), version)),
    mode        = IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), VALUES(mode), mode),
    acquired_at = IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), VALUES(acquired_at), acquired_at),
    metadata    = IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), VALUES(metadata), metadata),
    owner       = IF(owner IS NULL OR owner = VALUES(owner) OR expires_at <= UTC_TIMESTAMP(6), VALUES(owner), owner),
    expires_at  = IF(owner = VALUES(owner), GREATEST(IFNULL(expires_at, VALUES(expires_at)), VALUES(expires_at)), expires_at),
    updated_at  = IF(owner = VALUES(owner), VALUES(updated_at), updated_at)`

// mysqlEnsure is the pessimistic mode's insert of a free row (RowSQL.Ensure
// on MySQL), reading the floor as mysqlAcquire does; a duplicate is left
// unchanged but evaluates LAST_INSERT_ID(version), so that insert id 0 means
// the fence row was skipped.
const mysqlEnsure = `INSERT INTO dblock_locks (name, reentry, version, updated_at)
SELECT ?, 0, LAST_INSERT_ID(f.floor + 1), UTC_TIMESTAMP(6)
FROM dblock_fence f WHERE f.id = 1 FOR SHARE SKIP LOCKED
ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version)`

// mariadbEnsure is mysqlEnsure in MariaDB's words.
const mariadbEnsure = `INSERT INTO dblock_locks (name, reentry, version, updated_at)
SELECT ?, 0, LAST_INSERT_ID(f.floor + 1), UTC_TIMESTAMP(6)
FROM dblock_fence f WHERE f.id = 1 LOCK IN SHARE MODE SKIP LOCKED
ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version)`

// The shared-lock clauses that skip a locked row: MySQL 8 accepts SKIP LOCKED
// only after FOR SHARE, MariaDB (10.6+) only after LOCK IN SHARE MODE.
const (
	mysqlShareSkipLocked   = "FOR SHARE SKIP LOCKED"
	mariadbShareSkipLocked = "LOCK IN SHARE MODE SKIP LOCKED"
)

// mysqlFloorText reads the fencing floor inside a transaction (followed by
// the skip-locked shared-lock clause); see LeaseSQL.FloorInTx.
const mysqlFloorText = "SELECT floor FROM dblock_fence WHERE id = 1 "

// mysqlAcquireValues is mysqlAcquire with the floor read beforehand
// (the third parameter) instead of in the statement.
const mysqlAcquireValues = `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
VALUES (?, ?, 1, LAST_INSERT_ID(? + 1), ?,
       UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?)
` + mysqlAcquireUpdate

// owner is assigned before reentry, so it still sees the old count.
const mysqlRelease = `UPDATE dblock_locks SET
    owner      = IF(reentry > 1, owner, NULL),
    expires_at = IF(reentry > 1, expires_at, NULL),
    updated_at = UTC_TIMESTAMP(6),
    reentry    = reentry - 1
WHERE name = ? AND owner = ? AND version = ?`

const mysqlRenew = `UPDATE dblock_locks SET
    expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND),
    updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)`

var mysqlHolder = `SELECT IFNULL(owner, ''), version, IFNULL(mode, ''), IFNULL(` + myUs("expires_at") + `, 0), ` + myUs("UTC_TIMESTAMP(6)") + `, reentry
FROM dblock_locks WHERE name = ?`

// mysqlGuard cannot bound the caller's transaction as the PostgreSQL Guard
// does: MariaDB's idle_transaction_timeout is session-scoped (SET STATEMENT
// covers one statement, not the idle time after it) and MySQL has none. See
// optimistic.Locker.Guard for what users set instead.
const mysqlGuard = `SELECT 1 FROM dblock_locks
WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
LOCK IN SHARE MODE`

const mysqlForceRelease = `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner IS NOT NULL`

// mariadbNoWait makes one statement fail at once (1205) instead of waiting
// for a row lock.
const mariadbNoWait = "SET STATEMENT innodb_lock_wait_timeout=0 FOR "

var mysqlLease = LeaseSQL{
	Acquire: mysqlAcquire, Release: mysqlRelease, Renew: mysqlRenew,
	FloorInTx: mysqlFloorText + mysqlShareSkipLocked, AcquireInTx: mysqlAcquireValues,
	Holder: mysqlHolder, Guard: mysqlGuard, ForceRelease: mysqlForceRelease,
	Exists: "SELECT 1 FROM dblock_locks WHERE name = ?",
}

// Only the acquire refuses to wait: release and renew are CAS statements on a
// row held by us, which other statements lock for one autocommit statement at
// most, and failing them at once would leave the lease to expire.
var mariadbLease = LeaseSQL{
	Acquire: mariadbNoWait + mariadbAcquire, Release: mysqlRelease, Renew: mysqlRenew,
	FloorInTx: mysqlFloorText + mariadbShareSkipLocked, AcquireInTx: mariadbNoWait + mysqlAcquireValues,
	Holder: mysqlHolder, Guard: mysqlGuard, ForceRelease: mysqlForceRelease,
	Exists: "SELECT 1 FROM dblock_locks WHERE name = ?",
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
