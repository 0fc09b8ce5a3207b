package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// reapEngine is the binding of the reaper's statements on one database (see engine).
type reapEngine interface {
	// reapExpired is ReapExpired.
	reapExpired(ctx context.Context, db *DB, p ReapParams) (ReapResult, error)
	// reapWaiters is ReapWaiters.
	reapWaiters(ctx context.Context, db *DB, p ReapParams) (ReapResult, error)
	// reapIdle is ReapIdle.
	reapIdle(ctx context.Context, db *DB, p ReapParams) (ReapResult, error)
	// checkFloor is ReapCheck once the tables were found: where tokens start
	// from the fencing floor (MySQL, SQLite), it checks that its row exists.
	checkFloor(ctx context.Context, db *DB) error
}

// reapCounter is the engine of a database whose expired-lease and
// dead-waiter batches are each one statement that answers its count
// (PostgreSQL, SQLite): reapCount runs one (limit first, then args).
type reapCounter interface {
	Reap() *ReapSQL
	reapCount(ctx context.Context, db *DB, query string, limit int, args ...any) (int, error)
}

// reapCounted runs the one-statement batch query of c; more may remain when
// it reached the limit.
func reapCounted(ctx context.Context, db *DB, c reapCounter, query string, p ReapParams, args ...any) (ReapResult, error) {
	n, err := c.reapCount(ctx, db, query, p.Limit, args...)
	return ReapResult{Rows: n, More: n >= p.Limit}, err
}

// ReapSQL holds the statements of the reaper. Every statement touches at most
// a bounded number of rows, never waits for a row another transaction holds
// (SKIP LOCKED where the database has row locks), and re-checks its condition
// by the database clock on the rows it changes, so a holder renewing at the
// same moment wins.
//
// PostgreSQL does each step in one statement. MySQL and MariaDB read a batch
// of candidates without locking (so live rows are never locked, not even
// briefly), lock the candidates that are still stale by primary key with
// SKIP LOCKED, and change exactly the rows they locked, in a READ COMMITTED
// transaction (no gap locks). SQLite has one writer at a time, so its
// statements need no row locks.
//
// Statements marked "list" contain one %s that ListPlaceholders fills with
// bind markers for the names or ids of the batch.
type ReapSQL struct {
	// FreeExpired frees up to a limit of leases expired by the database
	// clock and reports how many it freed (PostgreSQL: notifying each name on
	// NotifyChannel in the same statement; SQLite). Empty on MySQL.
	FreeExpired string
	// ExpiredCandidates reads up to a limit of expired lease names without
	// locking (MySQL).
	ExpiredCandidates string
	// LockExpired (list) locks the candidates still expired, skipping locked rows (MySQL).
	LockExpired string
	// FreeLocked (list) frees the locked names, re-checking expiry (MySQL).
	FreeLocked string

	// DeleteWaiters deletes up to a limit of waiters whose heartbeat deadline
	// passed longer than a grace ago and reports how many (PostgreSQL: notifying
	// each name whose queue changed; SQLite). Empty on MySQL.
	DeleteWaiters string
	// WaiterCandidates, LockWaiters (list) and DeleteLockedWaiters (list) do the
	// same in three steps (MySQL).
	WaiterCandidates    string
	LockWaiters         string
	DeleteLockedWaiters string

	// DeleteIdle deletes up to a limit of rows free for longer than a
	// retention and reports how many (PostgreSQL, whose tokens come from a
	// sequence, so deletions never lower a later token). Empty elsewhere.
	DeleteIdle string
	// IdleCandidates reads up to a limit of idle names and their versions
	// without locking (MySQL).
	IdleCandidates string
	// LockIdle (list) locks the candidates still idle whose version is at most
	// a bound (the floor just raised), skipping locked rows (MySQL). On SQLite
	// it takes no list: it reads up to a limit of idle names and versions
	// inside the write transaction.
	LockIdle string
	// FenceFloor reads the fencing floor without locking; RaiseFloor raises it
	// to at least a version (MySQL, SQLite). On MariaDB RaiseFloor fails at
	// once (1205) instead of waiting for the row; on MySQL 8 LockFloor, run
	// first in the same transaction, does (3572).
	FenceFloor string
	LockFloor  string
	RaiseFloor string
	// DeleteLockedIdle (list) deletes the locked names, re-checking that they
	// are still free and idle and at most the version bound (MySQL, SQLite).
	DeleteLockedIdle string

	// Gauges reads the number of held leases, of live waiters and of dead
	// waiters (heartbeat deadline passed), and the age in microseconds of
	// the oldest lease expired but not freed.
	Gauges string
}

// ListPlaceholders fills a list statement's %s with n positional bind markers.
// Only markers are formatted into the SQL, never values.
func ListPlaceholders(stmt string, n int) string {
	return fmt.Sprintf(stmt, strings.TrimSuffix(strings.Repeat("?, ", n), ", "))
}

// ReapParams bound one reaper batch.
type ReapParams struct {
	// Limit is the most rows the batch touches (at least 1).
	Limit int
	// Age is how long past its deadline a row must be: the waiters' grace,
	// or the idle rows' retention. Ignored when freeing expired leases.
	Age time.Duration
}

// ReapResult is the outcome of one reaper batch.
type ReapResult struct {
	// Rows is how many rows the batch freed or deleted.
	Rows int
	// More reports whether a full batch was found: another batch may find more.
	More bool
	// MaxVersion is the highest version among the deleted idle rows (zero
	// otherwise, and on PostgreSQL, whose tokens come from a sequence).
	MaxVersion int64
}

// ReapGauges are the table's state as the reaper reports it.
type ReapGauges struct {
	// LocksHeld counts unexpired leases (pessimistic holds write no row and are not counted).
	LocksHeld int64
	// Waiters counts the live waiters of the fair queues.
	Waiters int64
	// DeadWaiters counts the waiters whose heartbeat deadline passed, not yet deleted.
	DeadWaiters int64
	// OldestStale is how long ago the oldest lease still in the table expired (zero if none).
	OldestStale time.Duration
}

// ReapExpired frees one batch of leases expired by the database clock (owner
// NULL, reentry 0, expires_at NULL); on PostgreSQL each freed name is notified
// on NotifyChannel in the same statement, waking its waiters.
func (db *DB) ReapExpired(ctx context.Context, p ReapParams) (ReapResult, error) {
	return db.Dialect.reapExpired(ctx, db, p)
}

// ReapWaiters deletes one batch of waiters whose heartbeat deadline passed more
// than p.Age ago. On PostgreSQL each name whose queue changed is notified.
func (db *DB) ReapWaiters(ctx context.Context, p ReapParams) (ReapResult, error) {
	return db.Dialect.reapWaiters(ctx, db, p)
}

// ReapIdle deletes one batch of rows free for longer than p.Age. On MySQL and
// SQLite, where a new row's first token is dblock_fence.floor + 1, the floor
// is first raised to at least the highest version among the rows deleted,
// and only rows whose version is at most the raised floor are deleted, so a
// later acquisition of a deleted name still gets a greater token.
// PostgreSQL's tokens come from a sequence.
//
// On SQLite the raise and the delete share one write transaction. On MySQL
// the raise is a statement of its own, committed before the delete begins
// (the floor only grows, so raising early is safe), which never waits for the
// fence row and holds it for that one statement only: acquisitions read the
// floor with a skip-locked shared lock (see mysqlAcquire), and none of
// them waits or fails for a pass.
func (db *DB) ReapIdle(ctx context.Context, p ReapParams) (ReapResult, error) {
	return db.Dialect.reapIdle(ctx, db, p)
}

// ReapGauges reads the number of held leases and waiters and the age of the
// oldest expired lease not yet freed.
func (db *DB) ReapGauges(ctx context.Context) (ReapGauges, error) {
	var g ReapGauges
	var us int64
	err := db.QueryRowxContext(ctx, db.Dialect.Reap().Gauges).Scan(&g.LocksHeld, &g.Waiters, &g.DeadWaiters, &us)
	if err != nil {
		return ReapGauges{}, db.Classify(err)
	}
	g.OldestStale = time.Duration(us) * time.Microsecond
	return g, nil
}

// scanIdle reads (name, version) rows and reports the names and the highest version.
func scanIdle(rows *sql.Rows) ([]any, int64, error) {
	defer rows.Close()
	var (
		names      []any
		maxVersion int64
	)
	for rows.Next() {
		var (
			name    any
			version int64
		)
		if err := rows.Scan(&name, &version); err != nil {
			return nil, 0, err
		}
		names = append(names, name)
		maxVersion = max(maxVersion, version)
	}
	return names, maxVersion, rows.Err()
}

// readFloor reads the fencing floor without locking.
func (db *DB) readFloor(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (int64, error) {
	var floor int64
	err := q.QueryRowContext(ctx, db.Dialect.Reap().FenceFloor).Scan(&floor)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, schemaMissing(db.Dialect, errors.New("dblock_fence has no row with id 1"))
	}
	return floor, err
}

// deleteIdle deletes the locked names that are still free and idle and whose
// version is at most maxVersion (the floor is at least that).
func (db *DB) deleteIdle(ctx context.Context, tx *sql.Tx, names []any, age, maxVersion int64) (int, error) {
	q := ListPlaceholders(db.Dialect.Reap().DeleteLockedIdle, len(names))
	r, err := tx.ExecContext(ctx, q, append(append(names, age), maxVersion)...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	return int(n), err
}

// reapTx runs fn in a transaction, committing when it succeeds and rolling
// back (even when ctx is done) when it fails. Errors are classified.
func (db *DB) reapTx(ctx context.Context, opts *sql.TxOptions, fn func(tx *sql.Tx) error) error {
	tx, err := db.DB.DB.BeginTx(ctx, opts)
	if err != nil {
		return db.Classify(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return db.Classify(err)
	}
	return db.Classify(tx.Commit())
}

// ReapCheck reports whether the tables the reaper works on exist (and, on
// MySQL and SQLite, the fencing floor's row): an error wrapping
// dblock.ErrSchemaMissing with the migrate command otherwise.
func (db *DB) ReapCheck(ctx context.Context) error {
	if _, err := db.ReapGauges(ctx); err != nil {
		return err
	}
	return db.Dialect.checkFloor(ctx, db)
}
