package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
)

// reapEngine is the binding of the reaper's statements on one database (see engine).
type reapEngine interface{}

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
	s := db.Dialect.Reap()
	switch db.Dialect.Kind() {
	case Postgres, SQLite:
		n, err := db.reapCount(ctx, s.FreeExpired, p.Limit)
		return ReapResult{Rows: n, More: n >= p.Limit}, err
	default:
		return db.reapMySQL(ctx, p, s.ExpiredCandidates, s.LockExpired, s.FreeLocked, false)
	}
}

// ReapWaiters deletes one batch of waiters whose heartbeat deadline passed more
// than p.Age ago. On PostgreSQL each name whose queue changed is notified.
func (db *DB) ReapWaiters(ctx context.Context, p ReapParams) (ReapResult, error) {
	s := db.Dialect.Reap()
	switch db.Dialect.Kind() {
	case Postgres, SQLite:
		n, err := db.reapCount(ctx, s.DeleteWaiters, p.Limit, p.Age.Microseconds())
		return ReapResult{Rows: n, More: n >= p.Limit}, err
	default:
		return db.reapMySQL(ctx, p, s.WaiterCandidates, s.LockWaiters, s.DeleteLockedWaiters, true)
	}
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
	s := db.Dialect.Reap()
	age := p.Age.Microseconds()
	switch db.Dialect.Kind() {
	case Postgres:
		n, err := db.reapCount(ctx, s.DeleteIdle, p.Limit, age)
		return ReapResult{Rows: n, More: n >= p.Limit}, err
	case SQLite:
		var res ReapResult
		err := db.reapTx(ctx, nil, func(tx *sql.Tx) error {
			names, maxVersion, err := db.lockIdle(ctx, tx, s.LockIdle, age, p.Limit)
			if err != nil {
				return err
			}
			res.More = len(names) >= p.Limit
			if len(names) == 0 {
				return nil
			}
			if err := db.raiseFloorTx(ctx, tx, maxVersion); err != nil {
				return err
			}
			res.Rows, err = db.deleteIdle(ctx, tx, names, age, maxVersion)
			res.MaxVersion = maxVersion
			return err
		})
		return res, err
	default:
		var res ReapResult
		names, maxVersion, err := db.idleCandidates(ctx, s.IdleCandidates, age, p.Limit)
		if err != nil || len(names) == 0 {
			return res, err
		}
		res.More = len(names) >= p.Limit
		if err := db.raiseFloor(ctx, maxVersion); err != nil {
			return ReapResult{}, err
		}
		err = db.reapTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(tx *sql.Tx) error {
			args := append(append(names, age), maxVersion)
			locked, err := db.candidatesTx(ctx, tx, ListPlaceholders(s.LockIdle, len(names)), args...)
			if err != nil || len(locked) == 0 {
				return err
			}
			res.Rows, err = db.deleteIdle(ctx, tx, locked, age, maxVersion)
			res.MaxVersion = maxVersion
			return err
		})
		if res.Rows == 0 {
			// Every candidate was locked or changed: no progress to make now.
			res.More = false
		}
		return res, err
	}
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

// reapCount runs a one-statement batch that reports its row count.
func (db *DB) reapCount(ctx context.Context, query string, limit int, args ...any) (int, error) {
	if db.Dialect.Kind() == Postgres {
		var n int64
		if err := db.QueryRowxContext(ctx, query, append([]any{limit}, args...)...).Scan(&n); err != nil {
			return 0, db.Classify(err)
		}
		return int(n), nil
	}
	r, err := db.ExecContext(ctx, query, append([]any{limit}, args...)...)
	if err != nil {
		return 0, db.Classify(err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return 0, db.Classify(err)
	}
	return int(n), nil
}

// reapMySQL runs a three-step batch: a non-locking read of candidates, then,
// in a READ COMMITTED transaction, a SKIP LOCKED lock of the candidates still
// stale and the change of exactly those. withAge passes p.Age to every
// statement (waiters); leases use the clock alone.
func (db *DB) reapMySQL(ctx context.Context, p ReapParams, candQ, lockQ, changeQ string, withAge bool) (ReapResult, error) {
	var extra []any
	if withAge {
		extra = []any{p.Age.Microseconds()}
	}
	cands, err := db.candidates(ctx, candQ, append(extra, p.Limit)...)
	if err != nil || len(cands) == 0 {
		return ReapResult{}, err
	}
	res := ReapResult{More: len(cands) >= p.Limit}
	err = db.reapTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(tx *sql.Tx) error {
		locked, err := db.candidatesTx(ctx, tx, ListPlaceholders(lockQ, len(cands)), append(cands, extra...)...)
		if err != nil || len(locked) == 0 {
			return err
		}
		r, err := tx.ExecContext(ctx, ListPlaceholders(changeQ, len(locked)), append(locked, extra...)...)
		if err != nil {
			return err
		}
		n, err := r.RowsAffected()
		res.Rows = int(n)
		return err
	})
	if res.Rows == 0 {
		res.More = false
	}
	return res, err
}

// candidates reads one column of keys (names or ids) without locking.
func (db *DB) candidates(ctx context.Context, query string, args ...any) ([]any, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, db.Classify(err)
	}
	out, err := scanKeys(rows)
	return out, db.Classify(err)
}

func (db *DB) candidatesTx(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]any, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return scanKeys(rows)
}

func scanKeys(rows *sql.Rows) ([]any, error) {
	defer rows.Close()
	var out []any
	for rows.Next() {
		var k any
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// lockIdle runs a statement returning (name, version) rows in tx and reports
// the names and the highest version.
func (db *DB) lockIdle(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]any, int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, 0, err
	}
	return scanIdle(rows)
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

// idleCandidates reads (name, version) rows without locking and returns the
// names and the highest version.
func (db *DB) idleCandidates(ctx context.Context, query string, args ...any) ([]any, int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, 0, db.Classify(err)
	}
	names, maxVersion, err := scanIdle(rows)
	return names, maxVersion, db.Classify(err)
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

// raiseFloorTx raises the fencing floor to at least v in tx (SQLite),
// skipping the write when the floor, which only grows, is already there.
func (db *DB) raiseFloorTx(ctx context.Context, tx *sql.Tx, v int64) error {
	floor, err := db.readFloor(ctx, tx)
	if err != nil || floor >= v {
		return err
	}
	_, err = tx.ExecContext(ctx, db.Dialect.Reap().RaiseFloor, v)
	return err
}

// Pauses between the attempts of a MySQL floor raise that found the fence
// row locked by acquisitions.
const (
	raiseRetryMin = time.Millisecond
	raiseRetryMax = 50 * time.Millisecond
)

// raiseFloor makes the fencing floor at least v and commits (MySQL), unless
// it is already there. The raise never waits for the fence row: while
// acquisitions hold shared locks on it, the attempt fails at once and is
// repeated after a growing, jittered pause until ctx ends. (A raise that
// waited would make every acquisition skip the row, and retry, for as long
// as it waited.)
func (db *DB) raiseFloor(ctx context.Context, v int64) error {
	floor, err := db.readFloor(ctx, db.DB.DB)
	if err != nil {
		return db.Classify(err)
	}
	if floor >= v {
		return nil
	}
	pause := raiseRetryMin
	for attempt := 1; ; attempt++ {
		err := db.raiseOnce(ctx, v)
		if err == nil {
			return nil
		}
		if !errors.Is(err, dblock.ErrNotAcquired) {
			return err
		}
		t := time.NewTimer(backoff.Jitter(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("raise the fencing floor: fence row still locked after %d attempts: %w", attempt, err)
		case <-t.C:
		}
		pause = min(2*pause, raiseRetryMax)
	}
}

// raiseOnce is one attempt of raiseFloor; an error wrapping
// dblock.ErrNotAcquired means the fence row was locked.
func (db *DB) raiseOnce(ctx context.Context, v int64) error {
	s := db.Dialect.Reap()
	if s.LockFloor == "" {
		_, err := db.ExecContext(ctx, s.RaiseFloor, v)
		return db.Classify(err)
	}
	return db.reapTx(ctx, nil, func(tx *sql.Tx) error {
		var floor int64
		if err := tx.QueryRowContext(ctx, s.LockFloor).Scan(&floor); err != nil {
			return err
		}
		if floor >= v {
			return nil
		}
		_, err := tx.ExecContext(ctx, s.RaiseFloor, v)
		return err
	})
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
	if db.Dialect.Kind() == Postgres {
		return nil
	}
	_, err := db.readFloor(ctx, db.DB.DB)
	return db.Classify(err)
}
