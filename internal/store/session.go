package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// sessionEngine is the binding of a pessimistic holder's session on one database (see engine).
type sessionEngine interface{}

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
		if mysqlError(err, 1094) { // Unknown thread id: gone already.
			err = nil
		}
	}
	return db.Classify(err)
}
