package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/sqlident"
)

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

// ---- PostgreSQL ----

// pgLockCols are the columns every pessimistic lock statement returns: the
// row's lease columns, the database clock, and what identifies the locking
// session (see SessionRef): its backend pid and the start of its transaction
// (now(), which pg_stat_activity shows as xact_start while it lasts).
var pgLockCols = `coalesce(l.owner, ''), coalesce(l.mode, ''), coalesce(` + pgUs("l.expires_at") + `, 0), ` +
	pgUs("clock_timestamp()") + `, pg_backend_pid(), ` + pgUs("now()") + `, 0::bigint`

// pgRowLock sets the transaction's idle bound ($2, ms) and lock timeout ($3,
// ms, '0' = none) in a FROM item: the row lock is taken above the join, after
// set_config ran, so the wait is already bounded. Both settings are LOCAL.
var pgRowLock = `SELECT ` + pgLockCols + `
FROM dblock_locks l,
     (SELECT set_config('idle_in_transaction_session_timeout', $2, true),
             set_config('lock_timeout', $3, true)) AS cfg
WHERE l.name = $1
FOR UPDATE OF l`

// pgRowLockNoWait sets only the idle bound ($2): NOWAIT needs no lock
// timeout, and a LOCAL lock_timeout would stay on the caller's transaction.
var pgRowLockNoWait = `SELECT ` + pgLockCols + `
FROM dblock_locks l,
     (SELECT set_config('idle_in_transaction_session_timeout', $2, true)) AS cfg
WHERE l.name = $1
FOR UPDATE OF l NOWAIT`

// pgToken takes the next token from dblock_token_seq and makes it durable
// before it is handed out. nextval alone is not enough: it writes WAL only
// once per 32 values, and a transaction that wrote no WAL of its own commits
// without flushing, so after a crash (or a failover to a standby that never
// received the record) the sequence could start below a token already
// given. A transactional logical message is a WAL record of this
// transaction that needs no privilege (EXECUTE is granted to PUBLIC): it
// assigns an xid, so the commit flushes the WAL up to its commit record,
// which covers the sequence's record, and waits for synchronous standbys.
// Logical decoding plugins that forward messages see them with the prefix
// "dblock".
const pgToken = `SELECT nextval('dblock_token_seq') FROM pg_logical_emit_message(true, 'dblock', 'token')`

var pgRow = RowSQL{
	Lock:       pgRowLock,
	LockNoWait: pgRowLockNoWait,
	Ensure: `INSERT INTO dblock_locks (name, reentry, version, updated_at)
VALUES ($1, 0, nextval('dblock_token_seq'), now())
ON CONFLICT (name) DO NOTHING`,
	Token: pgToken,
	LockMany: `SELECT l.name, ` + pgLockCols + `
FROM dblock_locks l,
     (SELECT set_config('idle_in_transaction_session_timeout', $1, true),
             set_config('lock_timeout', $2, true)) AS cfg
WHERE l.name IN (%s)
ORDER BY l.name
FOR UPDATE OF l%s`,
	LockManyNoWait: `SELECT l.name, ` + pgLockCols + `
FROM dblock_locks l,
     (SELECT set_config('idle_in_transaction_session_timeout', $1, true)) AS cfg
WHERE l.name IN (%s)
ORDER BY l.name
FOR UPDATE OF l%s`,
	Alive: `SELECT pid, coalesce(` + pgUs("xact_start") + `, 0), coalesce(state, '') FROM pg_stat_activity WHERE pid IN (%s)`,
}

// ---- MySQL / MariaDB ----

// myLockCols: the row's lease columns, the database clock, what identifies
// the locking session (see SessionRef): its connection id and the server's
// @@server_id, and the session's current hold bound (bound: MySQL 8's
// wait_timeout, MariaDB's idle_transaction_timeout; see SetHoldBound), so
// that a session that has it already needs no statement to set it.
func myLockCols(bound string) string {
	return `IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(` + myUs("expires_at") + `, 0), ` +
		myUs("UTC_TIMESTAMP(6)") + `, CONNECTION_ID(), @@server_id, ` + bound
}

// myRow is the RowSQL of MySQL 8 (bound @@SESSION.wait_timeout, Ensure
// reading the fence with FOR SHARE) or MariaDB.
func myRow(bound, shareSkipLocked string) RowSQL {
	cols := myLockCols(bound)
	lock := `SELECT ` + cols + ` FROM dblock_locks WHERE name = ? FOR UPDATE`
	return RowSQL{
		Lock:           lock,
		LockNoWait:     lock + " NOWAIT",
		Ensure:         fmt.Sprintf(mysqlEnsureText, shareSkipLocked),
		LockMany:       `SELECT name, ` + cols + ` FROM dblock_locks WHERE name IN (%s) ORDER BY name FOR UPDATE%s`,
		LockManyNoWait: `SELECT name, ` + cols + ` FROM dblock_locks WHERE name IN (%s) ORDER BY name FOR UPDATE%s`,
		Alive:          `SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN (%s)`,
	}
}

var mysqlRow = myRow("@@SESSION.wait_timeout", mysqlShareSkipLocked)

var mariadbRow = myRow("@@SESSION.idle_transaction_timeout", mariadbShareSkipLocked)

// ---- SQLite ----

// SQLite has no row locks: the lock is the write transaction itself (BEGIN
// IMMEDIATE, or the Ensure insert, which takes the write lock even when it
// inserts nothing).
var sqliteRow = RowSQL{
	Lock:       `SELECT IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `, 0, 0, 0 FROM dblock_locks WHERE name = ?1`,
	LockNoWait: `SELECT IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `, 0, 0, 0 FROM dblock_locks WHERE name = ?1`,
	Ensure: `INSERT INTO dblock_locks (name, reentry, version, updated_at)
VALUES (?1, 0, (SELECT floor + 1 FROM dblock_fence WHERE id = 1), ` + sqliteNow + `)
ON CONFLICT (name) DO NOTHING`,
	LockMany:       `SELECT name, IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `, 0, 0, 0 FROM dblock_locks WHERE name IN (%s) ORDER BY name%s`,
	LockManyNoWait: `SELECT name, IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `, 0, 0, 0 FROM dblock_locks WHERE name IN (%s) ORDER BY name%s`,
}

// ---- operations ----

// RowLockParams are the inputs of LockRow and LockRows.
type RowLockParams struct {
	// NoWait fails at once (dblock.ErrNotAcquired) when the row is locked.
	NoWait bool
	// Wait bounds the wait for the row lock; zero or negative waits until
	// ctx ends. Ignored with NoWait.
	Wait time.Duration
	// IdleTimeout asks the server to end the transaction when it stays idle
	// this long (PostgreSQL, rounded up as HoldBound says; MariaDB and MySQL
	// take it from SetHoldBound); zero leaves the server's setting.
	IdleTimeout time.Duration
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

// sessionRef builds the SessionRef of a lock statement's row: id, the
// dialect's extra column (PostgreSQL: now() in µs; MySQL: @@server_id), the
// database clock in µs and the session's hold bound (MySQL).
func (db *DB) sessionRef(id, extra, nowUs, bound int64) SessionRef {
	ref := SessionRef{ID: id, At: Micros(nowUs), Bound: bound}
	switch db.Dialect.Kind() {
	case Postgres:
		ref.TxStart = Micros(extra)
	case MySQL:
		ref.Server = extra
	}
	return ref
}

// EnsureRow makes sure name has a row, inserting a free one if needed. On
// PostgreSQL and MySQL run it on the pool (autocommit), never inside a
// transaction that others would then wait on; on SQLite run it inside the
// locking transaction, where it also takes the database's write lock. A
// row locked by someone else is reported as existing.
func (db *DB) EnsureRow(ctx context.Context, q Querier, name string) error {
	query := db.Dialect.Row().Ensure
	if mariaDB(db) {
		query = mariadbNoWait + query
	} else if db.Dialect.Kind() == MySQL {
		// MySQL 8 cannot tell the upsert not to wait: its duplicate-key
		// check waits for a holder's row lock (at least 1 s, the smallest
		// innodb_lock_wait_timeout). A consistent read first, which waits
		// for nothing, skips the insert when the row already exists (a
		// racing first acquisition created it), so TryAcquire does not wait
		// there; only a row created between the two statements can still
		// make the insert wait.
		var one int
		err := db.q(q).QueryRowxContext(ctx, db.Dialect.Lease().Exists, name).Scan(&one)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return db.Classify(err)
		}
	}
	var err error
	if db.Dialect.Kind() == MySQL {
		// Retries while a reaper raises the fencing floor (see mysqlAcquireText).
		_, _, err = db.execFenced(ctx, db.q(q), query, name)
	} else {
		_, err = db.q(q).ExecContext(ctx, query, name)
	}
	err = db.Classify(err)
	if errors.Is(err, dblock.ErrNotAcquired) {
		// Either the row exists and a holder has it locked (nothing to
		// insert), or — MySQL under REPEATABLE READ — another transaction's
		// locking read of a missing neighbour holds a gap lock here. A
		// consistent read, which waits for no lock, tells them apart; in the
		// second case the caller retries.
		var one int
		rerr := db.q(q).QueryRowxContext(ctx, db.Dialect.Lease().Exists, name).Scan(&one)
		if rerr == nil {
			return nil
		}
		if !errors.Is(rerr, sql.ErrNoRows) {
			return db.Classify(rerr)
		}
		return err
	}
	return err
}

func mariaDB(db *DB) bool {
	m, ok := db.Dialect.(interface{ MariaDB() bool })
	return ok && m.MariaDB()
}

// MariaDB reports whether db is a MariaDB server.
func (db *DB) MariaDB() bool { return mariaDB(db) }

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
	rs := db.Dialect.Row()
	var (
		rl           RowLock
		expUs, nowUs int64
		id, extra    int64
		bound        int64
	)
	scan := func(row *sqlx.Row) error {
		return row.Scan(&rl.Holder.Owner, &rl.Holder.Mode, &expUs, &nowUs, &id, &extra, &bound)
	}
	var err error
	switch db.Dialect.Kind() {
	case Postgres:
		idle := pgMillis(db.HoldBound(p.IdleTimeout))
		if p.NoWait {
			err = scan(tx.QueryRowxContext(ctx, rs.LockNoWait, name, idle))
		} else {
			err = scan(tx.QueryRowxContext(ctx, rs.Lock, name, idle, pgMillis(waitFor(ctx, p.Wait))))
			if err == nil {
				_, err = tx.ExecContext(ctx, "SET LOCAL lock_timeout TO DEFAULT")
			}
		}
	case MySQL:
		switch {
		case p.NoWait:
			err = scan(tx.QueryRowxContext(ctx, rs.LockNoWait, name))
		case mariaDB(db):
			q := fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout=%d FOR ", mysqlSeconds(waitFor(ctx, p.Wait))) + rs.Lock
			err = scan(tx.QueryRowxContext(ctx, q, name))
		default:
			err = db.mysqlSessionWait(ctx, tx, waitFor(ctx, p.Wait), func() error {
				return scan(tx.QueryRowxContext(ctx, rs.Lock, name))
			})
		}
	default:
		err = scan(tx.QueryRowxContext(ctx, rs.Lock, name))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return RowLock{}, nil
	}
	if err != nil {
		return RowLock{}, db.Classify(err)
	}
	rl.Found = true
	rl.Holder.Exists = true
	if expUs != 0 {
		rl.Holder.ExpiresAt = Micros(expUs)
	}
	rl.Holder.Now = Micros(nowUs)
	rl.Session = db.sessionRef(id, extra, nowUs, bound)
	return rl, nil
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
	rs := db.Dialect.Row()
	kind := db.Dialect.Kind()
	var args []any
	first := 1
	text := rs.LockMany
	if p.NoWait {
		text = rs.LockManyNoWait
	}
	if kind == Postgres {
		args = append(args, pgMillis(db.HoldBound(p.IdleTimeout)))
		if !p.NoWait {
			args = append(args, pgMillis(waitFor(ctx, p.Wait)))
		}
		first = len(args) + 1
	}
	ph := make([]string, len(names))
	for i, n := range names {
		ph[i] = db.Dialect.Placeholder(first + i)
		args = append(args, n)
	}
	suffix := ""
	if p.NoWait && kind != SQLite {
		suffix = " NOWAIT"
	}
	query := fmt.Sprintf(text, strings.Join(ph, ", "), suffix)
	if kind == MySQL && !p.NoWait && mariaDB(db) {
		query = fmt.Sprintf("SET STATEMENT innodb_lock_wait_timeout=%d FOR ", mysqlSeconds(waitFor(ctx, p.Wait))) + query
	}
	var (
		out     []LockedName
		session SessionRef
	)
	run := func() error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				ln           LockedName
				expUs, nowUs int64
				id, extra    int64
				bound        int64
			)
			if err := rows.Scan(&ln.Name, &ln.Holder.Owner, &ln.Holder.Mode, &expUs, &nowUs, &id, &extra, &bound); err != nil {
				return err
			}
			session = db.sessionRef(id, extra, nowUs, bound)
			ln.Holder.Exists = true
			if expUs != 0 {
				ln.Holder.ExpiresAt = Micros(expUs)
			}
			ln.Holder.Now = Micros(nowUs)
			out = append(out, ln)
		}
		return rows.Err()
	}
	var err error
	if kind == MySQL && !p.NoWait && !mariaDB(db) {
		err = db.mysqlSessionWait(ctx, tx, waitFor(ctx, p.Wait), run)
	} else {
		err = run()
	}
	if err == nil && kind == Postgres && !p.NoWait {
		_, err = tx.ExecContext(ctx, "SET LOCAL lock_timeout TO DEFAULT")
	}
	if err != nil {
		return nil, SessionRef{}, db.Classify(err)
	}
	return out, session, nil
}

// mysqlSessionWait runs fn with the session's innodb_lock_wait_timeout set to
// wait, and restores the previous value (MySQL 8 cannot bound one statement).
func (db *DB) mysqlSessionWait(ctx context.Context, tx Querier, wait time.Duration, fn func() error) error {
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(
		"SET @dblock_saved_lwt = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d", mysqlSeconds(wait))); err != nil {
		return err
	}
	err := fn()
	if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), "SET SESSION innodb_lock_wait_timeout = @dblock_saved_lwt"); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// BumpToken gives the row of name, locked by tx, a new fencing token, issued
// on the pool: BumpTokenOn(ctx, tx, nil, name). On SQLite, where nothing can
// commit while tx holds the database, it bumps the version inside tx instead,
// which is not durable before tx commits (a holder killed before its commit
// could see its token issued again); the pessimistic mode therefore issues
// SQLite tokens before it takes the lock.
func (db *DB) BumpToken(ctx context.Context, tx Querier, name string) (dblock.Token, error) {
	if db.Dialect.Kind() == SQLite {
		var v int64
		err := tx.QueryRowxContext(ctx, "UPDATE dblock_locks SET version = version + 1 WHERE name = ?1 RETURNING version", name).Scan(&v)
		return dblock.Token(v), db.Classify(err)
	}
	return db.BumpTokenOn(ctx, tx, nil, name)
}

// BumpTokenOn gives the row of name, locked by tx, a new fencing token and
// returns it. The token is durable before it is returned: a holder killed
// before commit must never see its token issued again, even though the
// transaction's own writes roll back, and even after a crash or failover of
// the server. So the token is issued (IssueToken) in autocommit mode on side,
// a connection other than tx's (nil: the pool; pass a dedicated connection
// when holders may exhaust the pool), then written into the row in tx with
// SetToken. On SQLite, which cannot commit on another connection while tx
// holds the database, it returns an error wrapping dblock.ErrInvalidOption.
func (db *DB) BumpTokenOn(ctx context.Context, tx, side Querier, name string) (dblock.Token, error) {
	if db.Dialect.Kind() == SQLite {
		return 0, fmt.Errorf("bump token %q: %w: on SQLite a token is issued before the lock is taken; ask for it with the first acquisition", name, dblock.ErrInvalidOption)
	}
	for range 3 {
		t, err := db.IssueToken(ctx, side, name)
		if err != nil {
			return 0, err
		}
		ok, err := db.SetToken(ctx, tx, name, t)
		if err != nil {
			return 0, err
		}
		if ok {
			return t, nil
		}
		// The row is missing, or at or past t: a token issued after ours
		// reached it before tx locked it. Issue again, a few times at most.
	}
	return 0, fmt.Errorf("bump token %q: the row's version stays ahead of newly issued tokens (or the row is missing)", name)
}

// IssueToken issues a fencing token durably, in autocommit mode on q (nil:
// the pool), and returns it: a token no one has been given and no one will
// be given again, above every version name had. PostgreSQL takes it from
// dblock_token_seq and flushes it with its commit (see pgToken); MySQL and
// SQLite raise dblock_fence.floor above both its current value and name's
// version (lease acquisitions never go below floor + 1).
func (db *DB) IssueToken(ctx context.Context, q Querier, name string) (dblock.Token, error) {
	q = db.q(q)
	switch db.Dialect.Kind() {
	case Postgres:
		var t int64
		err := q.QueryRowxContext(ctx, db.Dialect.Row().Token).Scan(&t)
		return dblock.Token(t), db.Classify(err)
	case MySQL:
		// A consistent read: it does not wait for the row lock its caller may hold.
		var v int64
		err := q.QueryRowxContext(ctx, "SELECT version FROM dblock_locks WHERE name = ?", name).Scan(&v)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, db.Classify(err)
		}
		r, err := q.ExecContext(ctx, "UPDATE dblock_fence SET floor = LAST_INSERT_ID(GREATEST(floor + 1, ?)) WHERE id = 1", v+1)
		if err != nil {
			return 0, db.Classify(err)
		}
		id, err := r.LastInsertId()
		return dblock.Token(id), err
	case SQLite:
		var t int64
		err := q.QueryRowxContext(ctx, `UPDATE dblock_fence
SET floor = max(floor + 1, IFNULL((SELECT version + 1 FROM dblock_locks WHERE name = ?1), 0))
WHERE id = 1 RETURNING floor`, name).Scan(&t)
		return dblock.Token(t), db.Classify(err)
	}
	return 0, fmt.Errorf("issue token: %w: unknown dialect %s", dblock.ErrInvalidOption, db.Dialect.Kind())
}

// SetToken writes an issued token into name's row inside tx. It reports false
// when the row is missing or already at or past the token (someone acquired
// the name between IssueToken and the lock): issue a new token and retry.
func (db *DB) SetToken(ctx context.Context, tx Querier, name string, t dblock.Token) (bool, error) {
	switch db.Dialect.Kind() {
	case SQLite:
		return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = ?1 WHERE name = ?2 AND version < ?1", int64(t), name)
	case Postgres:
		return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = $1 WHERE name = $2 AND version < $1", int64(t), name)
	}
	return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = ? WHERE name = ? AND version < ?", int64(t), name, int64(t))
}

// SetIssuedToken writes into name's row, inside tx, a token t that was
// issued (IssueToken) before tx locked the database, as the pessimistic mode
// does on SQLite; last is the highest of the tokens issued together with t
// (AcquireMany issues one per name; t itself otherwise). It reports false,
// changing nothing, when the row is missing or already at or past t (a lease
// acquisition got past t), or, on SQLite, when a token was issued after last
// in the meantime (dblock_fence.floor is above last): that token may have
// been handed to a holder that died before its commit, leaving the row's
// version below it, and a holder with t would then come after it with a
// smaller token. Issue new tokens and try again. The floor is read by the
// same statement. Elsewhere it is SetToken: the server databases issue a
// token only once the row is locked (BumpTokenOn).
func (db *DB) SetIssuedToken(ctx context.Context, tx Querier, name string, t, last dblock.Token) (bool, error) {
	if db.Dialect.Kind() != SQLite {
		return db.SetToken(ctx, tx, name, t)
	}
	return db.execOne(ctx, tx, `UPDATE dblock_locks SET version = ?1
WHERE name = ?2 AND version < ?1 AND (SELECT floor FROM dblock_fence WHERE id = 1) <= ?3`, int64(t), name, int64(last))
}

// mysqlHoldBoundMin is the smallest hold bound set on MySQL and MariaDB,
// whose settings take whole seconds: with a bound of one second, a holder
// that keeps its transaction busy every quarter of it (dblock exec) would
// lose the hold to one statement 750 ms late; with two, 1.5 s late.
const mysqlHoldBoundMin = 2 * time.Second

// HoldBound returns how long the server lets a pessimistic hold of TTL d
// stay idle before it ends the transaction (SetHoldBound, and the idle
// bound of the PostgreSQL lock statements): d rounded up, never down, to
// what the setting can say. PostgreSQL: the millisecond. MySQL and MariaDB:
// the whole second, and at least mysqlHoldBoundMin. Zero on SQLite, which
// has no such bound, and for d <= 0.
func (db *DB) HoldBound(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	switch db.Dialect.Kind() {
	case Postgres:
		return ceilTo(d, time.Millisecond)
	case MySQL:
		return max(ceilTo(d, time.Second), mysqlHoldBoundMin)
	}
	return 0
}

// ceilTo rounds d > 0 up to a multiple of unit.
func ceilTo(d, unit time.Duration) time.Duration {
	return (d + unit - 1) / unit * unit
}

// SetHoldBound asks the server to end the holding session if it stays idle
// longer than HoldBound(d) while it holds a pessimistic lock, so that a
// frozen or partitioned holder cannot keep the lock forever. It runs in the
// locking transaction once the lock is held; current is the session's
// setting the lock statement read (SessionRef.Bound).
//   - MariaDB: idle_transaction_timeout (whole seconds, at least 2). On a
//     pool Open opened, the setting stays on the session after the hold
//     (it only ends transactions left idle), so the next hold with the same
//     bound on that session sends nothing; on a pool the caller passed to
//     New, the session's value is saved here and restored by EndHold.
//   - MySQL 8, which has no idle-transaction bound: wait_timeout, the bound
//     on an idle session (whole seconds, at least 2), which ends the session
//     and so the transaction; always saved and restored, since it also ends
//     sessions idle in the pool.
//   - PostgreSQL sets idle_in_transaction_session_timeout inside the lock
//     statement (local to the transaction), and SQLite has no sessions: nil.
func (db *DB) SetHoldBound(ctx context.Context, tx Querier, d time.Duration, current int64) error {
	if db.Dialect.Kind() != MySQL {
		return nil
	}
	secs := int64(max(db.HoldBound(d), mysqlHoldBoundMin) / time.Second)
	var stmt string
	switch {
	case db.stickyHoldBound() && current == secs:
		return nil
	case db.stickyHoldBound():
		stmt = fmt.Sprintf("SET SESSION idle_transaction_timeout = %d", secs)
	case mariaDB(db):
		stmt = fmt.Sprintf("SET @dblock_saved_itt = @@SESSION.idle_transaction_timeout, SESSION idle_transaction_timeout = %d", secs)
	default:
		stmt = fmt.Sprintf("SET @dblock_saved_wt = @@SESSION.wait_timeout, SESSION wait_timeout = %d", secs)
	}
	_, err := tx.ExecContext(ctx, stmt)
	return db.Classify(err)
}

// stickyHoldBound reports whether the hold bound stays on the session after
// a hold (see SetHoldBound): MariaDB, on a pool Open opened.
func (db *DB) stickyHoldBound() bool { return db.owned && mariaDB(db) }

// mariadbEndHoldRestore restores the idle bound saved by SetHoldBound and,
// in the same round trip, checks that the transaction is still open: when it
// is not (the server rolled it back as a deadlock victim, or a statement
// committed it implicitly), IF evaluates the subquery, which fails with
// error 1242. The restore is then not applied either; the caller destroys
// the connection. mariadbTxOpen is the check alone, as a SET (an OK packet,
// no result set to read).
const (
	mariadbEndHoldRestore = `SET SESSION idle_transaction_timeout = IF(@@in_transaction = 1, @dblock_saved_itt,
    (SELECT 1 UNION SELECT 2))`
	mariadbTxOpen = `SET @dblock_tx_open = IF(@@in_transaction = 1, 1, (SELECT 1 UNION SELECT 2))`
)

// mariadbEndHold runs stmt (mariadbEndHoldRestore or mariadbTxOpen) and
// reports whether the transaction was open.
func (db *DB) mariadbEndHold(ctx context.Context, tx Querier, stmt string) (bool, error) {
	_, err := tx.ExecContext(ctx, stmt)
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == 1242 {
		return false, nil
	}
	return err == nil, db.Classify(err)
}

// EndHold runs on the locking transaction tx just before its COMMIT
// (commit) or ROLLBACK. On MySQL and MariaDB it restores what SetHoldBound
// saved and, before a COMMIT, reports whether tx is still open on the
// server: a deadlock victim's transaction is rolled back by the server while
// the client's *sql.Tx believes it open, and statements run after that run
// in autocommit mode. A COMMIT then would commit nothing and report success.
// Elsewhere it reports true: PostgreSQL keeps a failed transaction open (and
// aborted) until its end, and its COMMIT then reports the rollback (see
// CommitRolledBack).
func (db *DB) EndHold(ctx context.Context, tx Querier, commit bool) (open bool, err error) {
	if db.Dialect.Kind() != MySQL {
		return true, nil
	}
	if db.stickyHoldBound() {
		if !commit {
			return true, nil // Nothing to restore, and a rollback needs no check.
		}
		return db.mariadbEndHold(ctx, tx, mariadbTxOpen)
	}
	if mariaDB(db) {
		return db.mariadbEndHold(ctx, tx, mariadbEndHoldRestore)
	}
	// MySQL 8 has no @@in_transaction; SET TRANSACTION (the next
	// transaction's characteristics) is refused with error 1568 exactly
	// when a transaction is in progress, and needs no privilege.
	if _, err := tx.ExecContext(ctx, "SET SESSION wait_timeout = @dblock_saved_wt"); err != nil {
		return false, db.Classify(err)
	}
	_, err = tx.ExecContext(ctx, "SET TRANSACTION READ WRITE")
	var myErr *mysql.MySQLError
	switch {
	case errors.As(err, &myErr) && myErr.Number == 1568:
		return true, nil
	case err == nil:
		return false, nil
	}
	return false, db.Classify(err)
}

// CommitRolledBack reports whether a COMMIT's error says the server rolled
// the transaction back instead (PostgreSQL answers COMMIT of a failed
// transaction so).
func CommitRolledBack(err error) bool { return errors.Is(err, pgx.ErrTxCommitRollback) }

// Savepoint, RollbackToSavepoint and ReleaseSavepoint run the statements of
// the same names in tx (the same on every dialect). name is one of the
// caller's own identifiers, validated here. On MySQL a savepoint missing
// because the server rolled the whole transaction back fails with an error
// for which SavepointGone reports true.
func (db *DB) Savepoint(ctx context.Context, tx Querier, name string) error {
	return db.savepointStmt(ctx, tx, "SAVEPOINT ", name)
}

// RollbackToSavepoint undoes what tx did since the savepoint name (see Savepoint).
func (db *DB) RollbackToSavepoint(ctx context.Context, tx Querier, name string) error {
	return db.savepointStmt(ctx, tx, "ROLLBACK TO SAVEPOINT ", name)
}

// ReleaseSavepoint forgets the savepoint name, keeping what tx did (see Savepoint).
func (db *DB) ReleaseSavepoint(ctx context.Context, tx Querier, name string) error {
	return db.savepointStmt(ctx, tx, "RELEASE SAVEPOINT ", name)
}

func (db *DB) savepointStmt(ctx context.Context, tx Querier, verb, name string) error {
	if !sqlident.Valid(name) {
		return fmt.Errorf("%w: savepoint name %q", dblock.ErrInvalidOption, name)
	}
	_, err := tx.ExecContext(ctx, verb+name)
	return db.Classify(err)
}

// SavepointGone reports whether err says a savepoint does not exist (MySQL
// 1305), which on MySQL means the server ended the whole transaction.
func SavepointGone(err error) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && myErr.Number == 1305
}

// Incarnation describes one run of the database server, as seen on one
// connection (ServerIncarnation): a connection cannot outlive the server
// process it talks to, so everything asked on that connection is asked of
// that incarnation. Sessions that locked before it started belong to an
// earlier one, whatever id they had: their locks ended with it.
type Incarnation struct {
	// Server is MySQL's @@server_id (zero elsewhere).
	Server int64
	// Started is at or after the server's start, by the database clock:
	// PostgreSQL pg_postmaster_start_time() exactly; on MySQL, whose Uptime
	// status counts whole seconds, the end of the second in which the
	// server started (up to one second later when the two statements that
	// learn it straddle a second).
	Started time.Time
	// Learned is the database clock when the incarnation was learned.
	Learned time.Time
}

// Covers reports whether the session ref is known to have locked on this
// incarnation, so that its id may be looked up on it (SessionsAlive). A
// session that locked on another server (MySQL @@server_id) or before the
// server started belongs to an earlier incarnation, whatever runs under its
// id now. One that locked after inc.Learned locked on this one: the
// connection inc was learned on was talking to this incarnation then, and
// still is when it is asked about the session. On MySQL, whose Uptime counts
// whole seconds, a lock taken before inc.Learned in the second in which the
// server started cannot be placed, and is not covered: callers that know
// more (the lock was taken after the connection inc was learned on had been
// opened, so it was taken on the incarnation that connection talks to)
// may say so; others take it for an earlier incarnation's, so that its loss
// is never missed.
func (inc Incarnation) Covers(ref SessionRef) bool {
	if ref.Server != inc.Server {
		return false
	}
	return !ref.At.Before(inc.Started) || !ref.At.Before(inc.Learned)
}

// ServerIncarnation learns, on q (a connection the caller keeps: the answer
// holds for as long as q's session lives), which run of the server q talks
// to (see Incarnation). PostgreSQL: pg_postmaster_start_time(). MySQL and
// MariaDB: @@server_id and the start derived from the Uptime status (SHOW
// GLOBAL STATUS needs no privilege), two round trips. SQLite has no server:
// the zero Incarnation, which covers every SessionRef of SQLite.
//
// The answer assumes that q's session ends with the server process, as a
// direct connection does. A proxy that keeps its clients' connections
// across a restart of the server (ProxySQL; PgBouncer) breaks that: there a
// restart is seen only by a connection that the proxy closes. On PostgreSQL
// SessionsAlive does not depend on it (a session is also known by its
// transaction's start).
func (db *DB) ServerIncarnation(ctx context.Context, q Querier) (Incarnation, error) {
	var inc Incarnation
	switch db.Dialect.Kind() {
	case Postgres:
		var startUs, nowUs int64
		err := db.q(q).QueryRowxContext(ctx, `SELECT `+pgUs("pg_postmaster_start_time()")+`, `+pgUs("clock_timestamp()")).Scan(&startUs, &nowUs)
		if err != nil {
			return inc, db.Classify(err)
		}
		inc.Started, inc.Learned = Micros(startUs), Micros(nowUs)
	case MySQL:
		// Uptime is the whole seconds between the server's start and the
		// statement's start, both truncated to the second; read the clock
		// after it, so that the clock's second, less Uptime, plus one
		// second, is at or after the start.
		var name string
		var uptime int64
		if err := db.q(q).QueryRowxContext(ctx, "SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&name, &uptime); err != nil {
			return inc, db.Classify(err)
		}
		var nowUs int64
		if err := db.q(q).QueryRowxContext(ctx, `SELECT @@server_id, `+myUs("UTC_TIMESTAMP(6)")).Scan(&inc.Server, &nowUs); err != nil {
			return inc, db.Classify(err)
		}
		inc.Learned = Micros(nowUs)
		inc.Started = inc.Learned.Truncate(time.Second).Add(time.Duration(1-uptime) * time.Second)
	}
	return inc, nil
}

// SessionsAlive reports, for each of refs, whether its session still
// exists under its id and, on PostgreSQL, is still in the locking
// transaction (pg_stat_activity.xact_start equal to the lock's now(); where
// that is hidden, as for another role's sessions or with track_activities
// off, a session in a transaction, or one whose state is hidden too, is
// taken for it). It asks on q. An id alone cannot tell a new session that a
// restarted server gave the same id (MySQL counts connection ids from 1
// again): pass only refs known to belong to the incarnation that q talks
// to (see Incarnation.Covers). SQLite has no sessions: every ref is alive.
func (db *DB) SessionsAlive(ctx context.Context, q Querier, refs []SessionRef) ([]bool, error) {
	alive := make([]bool, len(refs))
	kind := db.Dialect.Kind()
	if kind == SQLite {
		for i := range alive {
			alive[i] = true
		}
		return alive, nil
	}
	var (
		ph   []string
		args []any
		seen = map[int64]bool{}
	)
	for _, r := range refs {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		ph = append(ph, db.Dialect.Placeholder(len(ph)+1))
		args = append(args, r.ID)
	}
	if len(ph) == 0 {
		return alive, nil
	}
	type found struct {
		txUs  int64
		state string
	}
	sessions := make(map[int64]found, len(args))
	rows, err := db.q(q).QueryContext(ctx, fmt.Sprintf(db.Dialect.Row().Alive, strings.Join(ph, ", ")), args...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id int64
			f  found
		)
		dest := []any{&id}
		if kind == Postgres {
			dest = append(dest, &f.txUs, &f.state)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		sessions[id] = f
	}
	if err := rows.Err(); err != nil {
		return nil, db.Classify(err)
	}
	for i, r := range refs {
		f, ok := sessions[r.ID]
		switch {
		case !ok:
		case kind != Postgres:
			alive[i] = true
		case f.txUs != 0:
			// The session is in a transaction: the locking one?
			alive[i] = f.txUs == r.TxStart.UnixMicro()
		default:
			// xact_start hidden (another role's session, or
			// track_activities off: state is then NULL or 'disabled'),
			// or the session is in no transaction at all ('idle').
			alive[i] = f.state != "idle"
		}
	}
	return alive, nil
}

// SQLiteBusyTimeout reads the connection's busy timeout and sets it to d,
// returning the previous value (SQLite only).
func (db *DB) SQLiteBusyTimeout(ctx context.Context, conn Querier, d time.Duration) (time.Duration, error) {
	var prev int64
	if err := conn.QueryRowxContext(ctx, "PRAGMA busy_timeout").Scan(&prev); err != nil {
		return 0, db.Classify(err)
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", d.Milliseconds())); err != nil {
		return 0, db.Classify(err)
	}
	return time.Duration(prev) * time.Millisecond, nil
}

// sqliteWriteLock changes nothing but, being a write, takes the database's
// write lock in a transaction begun DEFERRED; it is cheaper to prepare than
// the insert of EnsureRow.
const sqliteWriteLock = "UPDATE dblock_fence SET floor = floor WHERE 0"

// SQLiteWriteLock takes the database's write lock in tx (SQLite only; a
// no-op elsewhere), whatever mode the pool begins transactions in.
func (db *DB) SQLiteWriteLock(ctx context.Context, tx Querier) error {
	if db.Dialect.Kind() != SQLite {
		return nil
	}
	_, err := tx.ExecContext(ctx, sqliteWriteLock)
	return db.Classify(err)
}

// ---- users' own rows ----

// QuoteIdent validates an identifier (optionally schema.table) and quotes it
// for the dialect (sqlident.Quote). Errors wrap dblock.ErrInvalidOption.
func (db *DB) QuoteIdent(ident string) (string, error) {
	q := `"`
	if db.Dialect.Kind() == MySQL {
		q = "`"
	}
	return sqlident.Quote(ident, q, true)
}

// UserRowsParams are the inputs of LockUserRows.
type UserRowsParams struct {
	Table, KeyColumn string // Validated and quoted.
	Keys             []any
	NoWait           bool // Fail at once (dblock.ErrNotAcquired) if any row is locked.
	SkipLocked       bool // Lock the rows that are free and skip the others.
}

// LockUserRows locks the rows of a user's table whose key is in p.Keys, in
// key order (the database sorts, so callers locking overlapping sets never
// deadlock on each other), inside tx. It returns the keys locked, as the
// database returns them, in that order.
//
// On MySQL and MariaDB the key column must be indexed: a locking read locks
// every row it scans, so without an index it locks the whole table (and
// deadlocks with every other locker of it).
//
// SQLite has no row locks: LockUserRows takes the database's write lock in
// tx (a write to the table that changes nothing, so it holds even in a
// transaction begun DEFERRED, waiting per the connection's busy timeout), and
// the write transaction is the lock of every row. NoWait and SkipLocked,
// which need row locks, are refused there (dblock.ErrInvalidOption).
func (db *DB) LockUserRows(ctx context.Context, tx Querier, p UserRowsParams) ([]any, error) {
	if p.NoWait && p.SkipLocked {
		return nil, fmt.Errorf("%w: NoWait and SkipLocked are exclusive", dblock.ErrInvalidOption)
	}
	if db.Dialect.Kind() == SQLite && (p.NoWait || p.SkipLocked) {
		return nil, fmt.Errorf("%w: SQLite has no row locks: NoWait and SkipLocked are not supported (the write transaction locks the whole database)", dblock.ErrInvalidOption)
	}
	table, err := db.QuoteIdent(p.Table)
	if err != nil {
		return nil, err
	}
	col, err := db.QuoteIdent(p.KeyColumn)
	if err != nil {
		return nil, err
	}
	if strings.Contains(p.KeyColumn, ".") {
		return nil, fmt.Errorf("%w: key column %q must not be qualified", dblock.ErrInvalidOption, p.KeyColumn)
	}
	if len(p.Keys) == 0 {
		return nil, nil
	}
	ph := make([]string, len(p.Keys))
	for i := range p.Keys {
		ph[i] = db.Dialect.Placeholder(i + 1)
	}
	query := fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s) ORDER BY %s", col, table, col, strings.Join(ph, ", "), col)
	if db.Dialect.Kind() == SQLite {
		// WHERE 0 matches nothing, yet the statement is a write and
		// takes the database's write lock.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("UPDATE %s SET %s = %s WHERE 0", table, col, col)); err != nil {
			return nil, db.Classify(err)
		}
	} else {
		query += " FOR UPDATE"
		switch {
		case p.NoWait:
			query += " NOWAIT"
		case p.SkipLocked:
			query += " SKIP LOCKED"
		}
	}
	rows, err := tx.QueryContext(ctx, query, p.Keys...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	var keys []any
	for rows.Next() {
		var k any
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		if b, ok := k.([]byte); ok {
			k = string(b)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, db.Classify(err)
	}
	return keys, nil
}

// ---- helpers ----

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

// pgMillis renders d as a PostgreSQL milliseconds setting; "0" disables.
func pgMillis(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	if ms > math.MaxInt32 {
		ms = math.MaxInt32
	}
	return fmt.Sprintf("%d", ms)
}

// mysqlSeconds renders a lock-wait bound in whole seconds (rounded up, at
// least 1; zero means unbounded, which is the server's maximum).
func mysqlSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 100000000
	}
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}

// SessionID returns the server's id of q's connection (PostgreSQL backend
// pid, MySQL CONNECTION_ID()); zero on SQLite.
func (db *DB) SessionID(ctx context.Context, q Querier) (int64, error) {
	var query string
	switch db.Dialect.Kind() {
	case Postgres:
		query = "SELECT pg_backend_pid()"
	case MySQL:
		query = "SELECT CONNECTION_ID()"
	default:
		return 0, nil
	}
	var id int64
	if err := q.QueryRowxContext(ctx, query).Scan(&id); err != nil {
		return 0, db.Classify(err)
	}
	return id, nil
}

// CancelStatement cancels the statement the session id is running, from q
// (nil: the pool; PostgreSQL pg_cancel_backend, MySQL KILL QUERY). A client
// that gives up a lock wait by closing its connection does not end the
// server's wait on MySQL: without this, the abandoned wait could still be
// granted the lock, and hold it until the server notices the closed
// connection.
func (db *DB) CancelStatement(ctx context.Context, q Querier, id int64) error {
	var err error
	switch db.Dialect.Kind() {
	case Postgres:
		_, err = db.q(q).ExecContext(ctx, "SELECT pg_cancel_backend($1)", id)
	case MySQL:
		_, err = db.q(q).ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id))
	}
	return db.Classify(err)
}

// KillSession ends the server session id from q (nil: the pool;
// PostgreSQL pg_terminate_backend, MySQL KILL CONNECTION), rolling back its
// transaction; a session already gone is not an error. SQLite has no
// sessions: nil.
func (db *DB) KillSession(ctx context.Context, q Querier, id int64) error {
	var err error
	switch db.Dialect.Kind() {
	case Postgres:
		_, err = db.q(q).ExecContext(ctx, "SELECT pg_terminate_backend($1)", id)
	case MySQL:
		_, err = db.q(q).ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		var myErr *mysql.MySQLError
		if errors.As(err, &myErr) && myErr.Number == 1094 { // Unknown thread id: gone already.
			err = nil
		}
	}
	return db.Classify(err)
}
