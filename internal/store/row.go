package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dblock-go/dblock"
)

// rowEngine is the binding of the row locks of the pessimistic mode on one database (see engine).
type rowEngine interface {
	// ensureRow is EnsureRow on q (not nil).
	ensureRow(ctx context.Context, db *DB, q Querier, name string) error
	// lockRow runs the statement of LockRow in tx (on p.Conn where given),
	// scanning its row into dest; its errors are unclassified.
	lockRow(ctx context.Context, db *DB, tx Querier, name string, p RowLockParams, dest []any) error
	// lockRows runs the statement of LockRows for names in tx through run,
	// which sends it and reads its rows; its errors are unclassified.
	lockRows(ctx context.Context, db *DB, tx Querier, names []string, p RowLockParams, run func(query string, args []any) error) error
	// sessionRef builds the SessionRef of a lock statement's row: id, the
	// database's extra column (PostgreSQL: now() in µs; MySQL: @@server_id),
	// the database clock in µs and the session's hold bound (MySQL).
	sessionRef(id, extra, nowUs, bound int64) SessionRef
}

// RowSQL holds the statements of transaction-held (pessimistic) locks. Every
// statement runs inside the locking transaction on its pinned connection,
// except Ensure, which runs in autocommit mode on the pool (PostgreSQL,
// MySQL) so that no uncommitted insert makes other acquirers wait.
type RowSQL struct {
	// Lock locks a name's row and reads its lease columns, the database
	// clock and the session id. It waits for the row per the transaction's
	// lock timeout.
	Lock string
	// LockNoWait is Lock failing at once when the row is locked. It leaves
	// the transaction's lock timeout alone (PostgreSQL sets only the idle
	// bound), so the caller's later statements keep theirs.
	LockNoWait string
	// LockShared and LockSharedNoWait are Lock and LockNoWait taking the
	// row's shared lock (PostgreSQL FOR KEY SHARE, which the readers of the
	// lease modes do not conflict with: they lock the row FOR NO KEY
	// UPDATE; MySQL FOR SHARE, MariaDB LOCK IN SHARE MODE; on SQLite,
	// which locks the database, Lock itself).
	LockShared, LockSharedNoWait string
	// Ensure inserts a free row for a name unless one exists; the first
	// token follows the same floor rule as lease rows.
	Ensure string
	// Token issues a fencing token durably, in autocommit mode, on a
	// connection other than the holder's (PostgreSQL; MySQL and SQLite raise
	// dblock_fence.floor instead, see IssueToken).
	Token string
	// LockMany locks several names' rows in name order; %s is the list of
	// placeholders and %s the lock clause suffix.
	LockMany string
	// LockManyNoWait is LockMany with NOWAIT, leaving the lock timeout alone
	// (PostgreSQL: its first placeholder is the idle bound, then the names).
	LockManyNoWait string
	// Alive lists which of the given session ids still exist (PostgreSQL:
	// with their transaction's start and state); %s is the list of
	// placeholders.
	Alive string
}

// RowLockParams are the inputs of LockRow and LockRows.
type RowLockParams struct {
	// NoWait fails at once (dblock.ErrNotAcquired) when the row is locked.
	NoWait bool
	// Shared takes the row's shared lock (RowSQL.LockShared; LockRow only).
	Shared bool
	// Wait bounds the wait for the row lock; zero or negative waits until
	// ctx ends. Ignored with NoWait.
	Wait time.Duration
	// IdleTimeout asks the server to end the transaction when it stays idle
	// this long (PostgreSQL, rounded up as HoldBound says; MariaDB and MySQL
	// take it from SetHoldBound); zero leaves the server's setting.
	IdleTimeout time.Duration
	// BeginDeferred: the transaction was begun with a context from
	// WithDeferredBegin and this is its first statement. On MariaDB the lock
	// then goes as MariaDBLockBegin, which begins the transaction
	// (lockbegin.go); elsewhere the driver sends the BEGIN with it or
	// before it alike.
	BeginDeferred bool
	// Conn, when not nil, is the pinned connection the transaction runs
	// on: where the driver has a native interface (PostgreSQL's pgx), the
	// lock statement goes through it instead of database/sql (a dozen
	// allocations fewer).
	Conn *sql.Conn
}

// RowLock is what LockRow found in the locked row.
type RowLock struct {
	// Found is false when the name has no row (nothing was locked; on
	// PostgreSQL and MySQL call EnsureRow outside the transaction and retry).
	Found bool
	// Holder is the lease holder named in the row (Holder.Held() reports
	// an unexpired lease that a pessimistic acquirer must honour).
	Holder Holder
	// Session identifies the locking session (its ID is zero on SQLite).
	Session SessionRef
}

// SessionRef identifies the server session that holds a pessimistic lock,
// for SessionsAlive. Its id alone does not: a restarted MariaDB or MySQL
// hands out connection ids from 1 again, and PostgreSQL backend pids are
// operating-system pids, which the system reuses; a session found under the
// id may be a new one. So the reference also names the server and, on
// PostgreSQL, the locking transaction.
type SessionRef struct {
	// ID is the session's id: PostgreSQL backend pid, MySQL
	// CONNECTION_ID(); zero on SQLite.
	ID int64
	// Server is MySQL's @@server_id (zero elsewhere): a failover to
	// another server behind the same address is a change of server.
	Server int64
	// TxStart is, on PostgreSQL, the start of the locking transaction
	// (now()), which pg_stat_activity shows as xact_start for as long as
	// the transaction lasts; zero elsewhere.
	TxStart time.Time
	// At is the database clock when the lock was taken: a session that
	// locked before the server (re)started belongs to an earlier
	// incarnation of it (see Incarnation).
	At time.Time
	// Bound is, on MySQL and MariaDB, the session's hold bound (seconds)
	// when the lock was taken (see SetHoldBound); zero elsewhere.
	Bound int64
}

// EnsureRow makes sure name has a row, inserting a free one if needed. On
// PostgreSQL and MySQL run it on the pool (autocommit), never inside a
// transaction that others would then wait on; on SQLite run it inside the
// locking transaction, where it also takes the database's write lock. A
// row locked by someone else is reported as existing.
func (db *DB) EnsureRow(ctx context.Context, q Querier, name string) error {
	return db.Dialect.ensureRow(ctx, db, db.q(q), name)
}

// insertRow runs the insert of EnsureRow, query, on q.
func (db *DB) insertRow(ctx context.Context, q Querier, query, name string) error {
	_, err := q.ExecContext(ctx, query, name)
	return db.ensuredRow(ctx, q, name, err)
}

// ensuredRow reads err, the outcome of EnsureRow's insert on q, and returns
// EnsureRow's error.
func (db *DB) ensuredRow(ctx context.Context, q Querier, name string, err error) error {
	err = db.Classify(err)
	if !errors.Is(err, dblock.ErrNotAcquired) {
		return err
	}
	// Either the row exists and a holder has it locked (nothing to
	// insert), or — MySQL under REPEATABLE READ — another transaction's
	// locking read of a missing neighbour holds a gap lock here. A
	// consistent read, which waits for no lock, tells them apart; in the
	// second case the caller retries.
	exists, rerr := db.rowExists(ctx, q, name)
	switch {
	case rerr != nil:
		return db.Classify(rerr)
	case exists:
		return nil
	}
	return err
}

// rowExists reads, with a consistent read that waits for no lock, whether
// name has a row; its error is unclassified.
func (db *DB) rowExists(ctx context.Context, q Querier, name string) (bool, error) {
	var one int
	err := q.QueryRowxContext(ctx, db.Dialect.Lease().Exists, name).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// LockRow locks name's row in tx (a transaction on a pinned connection) and
// reads it. A lock that could not be had in time is an error wrapping
// dblock.ErrNotAcquired; a deadlock wraps dblock.ErrDeadlock.
//
// Waiting: PostgreSQL sets lock_timeout for this transaction (and resets it
// after the wait, so the caller's later statements keep the server's
// setting); MariaDB bounds only this statement (SET STATEMENT); MySQL 8
// sets the session's innodb_lock_wait_timeout for the statement and restores
// it. On SQLite the transaction's write lock is the lock: this only reads.
func (db *DB) LockRow(ctx context.Context, tx Querier, name string, p RowLockParams) (RowLock, error) {
	// One value holds every column scanned (one allocation, where a
	// variable each would escape on its own).
	r := new(lockedRow)
	err := db.Dialect.lockRow(ctx, db, tx, name, p, r.fields())
	if errors.Is(err, sql.ErrNoRows) {
		return RowLock{}, nil
	}
	if err != nil {
		return RowLock{}, db.Classify(err)
	}
	rl := r.rl
	rl.Found = true
	rl.Holder.Exists = true
	if r.expUs != 0 {
		rl.Holder.ExpiresAt = Micros(r.expUs)
	}
	rl.Holder.Now = Micros(r.nowUs)
	rl.Session = db.Dialect.sessionRef(r.id, r.extra, r.nowUs, r.bound)
	return rl, nil
}

// lockedRow is what LockRow's statement reads, in the engines' column order
// (fields).
type lockedRow struct {
	rl           RowLock
	expUs, nowUs int64
	id, extra    int64
	bound        int64
	dest         [7]any
}

func (r *lockedRow) fields() []any {
	r.dest = [7]any{&r.rl.Holder.Owner, &r.rl.Holder.Mode, &r.expUs, &r.nowUs, &r.id, &r.extra, &r.bound}
	return r.dest[:]
}

// lockText is the lock statement p asks for: exclusive or shared, waiting
// or not.
func (rs RowSQL) lockText(p RowLockParams) string {
	switch {
	case p.Shared && p.NoWait:
		return rs.LockSharedNoWait
	case p.Shared:
		return rs.LockShared
	case p.NoWait:
		return rs.LockNoWait
	}
	return rs.Lock
}

// LockedName is one row locked by LockRows.
type LockedName struct {
	Name   string
	Holder Holder
}

// LockRows locks the rows of names in tx in name order (the database sorts,
// so two callers locking overlapping sets lock them in the same order), and
// returns what it found, in that order, with the locking session. Names
// without a row are absent from the result.
func (db *DB) LockRows(ctx context.Context, tx Querier, names []string, p RowLockParams) ([]LockedName, SessionRef, error) {
	if len(names) == 0 {
		return nil, SessionRef{}, nil
	}
	var (
		out     []LockedName
		session SessionRef
	)
	run := func(query string, args []any) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			ln, ref, err := db.scanLockedName(rows)
			if err != nil {
				return err
			}
			session = ref
			out = append(out, ln)
		}
		return rows.Err()
	}
	if err := db.Dialect.lockRows(ctx, db, tx, names, p, run); err != nil {
		return nil, SessionRef{}, db.Classify(err)
	}
	return out, session, nil
}

// scanLockedName reads one row of the LockMany statements: the name, its
// lease columns and the locking session.
func (db *DB) scanLockedName(rows *sql.Rows) (LockedName, SessionRef, error) {
	var (
		ln           LockedName
		expUs, nowUs int64
		id, extra    int64
		bound        int64
	)
	if err := rows.Scan(&ln.Name, &ln.Holder.Owner, &ln.Holder.Mode, &expUs, &nowUs, &id, &extra, &bound); err != nil {
		return LockedName{}, SessionRef{}, err
	}
	ln.Holder.Exists = true
	if expUs != 0 {
		ln.Holder.ExpiresAt = Micros(expUs)
	}
	ln.Holder.Now = Micros(nowUs)
	return ln, db.Dialect.sessionRef(id, extra, nowUs, bound), nil
}

// lockManyQuery renders d's LockMany statement (LockManyNoWait with noWait)
// for names, whose placeholders follow the arguments args already has, and
// the lock clause suffix; it returns the text and args with the names
// appended.
func lockManyQuery(d Dialect, noWait bool, args []any, names []string, suffix string) (string, []any) {
	rs := d.Row()
	text := rs.LockMany
	if noWait {
		text = rs.LockManyNoWait
	}
	first := len(args) + 1
	ph := make([]string, len(names))
	for i, n := range names {
		ph[i] = d.Placeholder(first + i)
		args = append(args, n)
	}
	return fmt.Sprintf(text, strings.Join(ph, ", "), suffix), args
}

// waitFor returns the wait bound: the smaller of wait (when positive) and
// the time left before ctx's deadline; zero means unbounded.
func waitFor(ctx context.Context, wait time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			left = time.Millisecond
		}
		if wait <= 0 || left < wait {
			wait = left
		}
	}
	return wait
}
