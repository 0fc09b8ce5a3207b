package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// sessionEngine is the binding of a pessimistic holder's session on one database (see engine).
type sessionEngine interface {
	// serverIncarnation is ServerIncarnation on q (not nil).
	serverIncarnation(ctx context.Context, db *DB, q Querier) (Incarnation, error)
	// sessionsAlive is SessionsAlive on q (not nil).
	sessionsAlive(ctx context.Context, db *DB, q Querier, refs []SessionRef) ([]bool, error)
	// writeLock is SQLiteWriteLock.
	writeLock(ctx context.Context, db *DB, tx Querier) error
	// sessionID is SessionID.
	sessionID(ctx context.Context, db *DB, q Querier) (int64, error)
	// cancelStatement is CancelStatement on q (not nil).
	cancelStatement(ctx context.Context, db *DB, q Querier, id int64) error
	// killSession is KillSession on q (not nil).
	killSession(ctx context.Context, db *DB, q Querier, id int64) error
	// sessionFromPort is SessionFromPort on q (not nil).
	sessionFromPort(ctx context.Context, db *DB, q Querier, id int64, port int) (bool, error)
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
	return db.Dialect.serverIncarnation(ctx, db, db.q(q))
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
	return db.Dialect.sessionsAlive(ctx, db, db.q(q), refs)
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

// SQLiteWriteLock takes the database's write lock in tx (SQLite only; a
// no-op elsewhere), whatever mode the pool begins transactions in.
func (db *DB) SQLiteWriteLock(ctx context.Context, tx Querier) error {
	return db.Dialect.writeLock(ctx, db, tx)
}

// SessionID returns the server's id of q's connection (PostgreSQL backend
// pid, MySQL CONNECTION_ID()); zero on SQLite.
func (db *DB) SessionID(ctx context.Context, q Querier) (int64, error) {
	return db.Dialect.sessionID(ctx, db, q)
}

// CutOffSession is the server session of a connection its driver closed
// under a statement, as the driver knew it: the id it was told when it
// connected, and the client's TCP port.
type CutOffSession struct {
	ID         int64
	ClientPort int
}

// DiscardedSession returns the session of conn when its driver has closed
// the connection under a statement (one cut off in flight by its context)
// and learned the session's id when it connected (PostgreSQL through pgx:
// the backend pid, Native.DiscardedSession); false otherwise. The server
// may still run that statement, or wait in it, until it notices the closed
// connection. The id is the one the server end of the socket gave: behind a
// pooler (PgBouncer) it is the pooler's, so check it with SessionFromPort
// before ending a session by it.
func (db *DB) DiscardedSession(conn *sql.Conn) (CutOffSession, bool) {
	if conn == nil || db.native == nil || db.native.DiscardedSession == nil {
		return CutOffSession{}, false
	}
	return db.native.DiscardedSession(conn)
}

// SessionFromPort reports, asking on q (nil: the pool), whether the server
// lists session id as a client's connected from TCP port port: a session
// id a driver was told by a pooler, not the server, is not (the server
// sees the pooler's port), nor is one that has ended. SQLite: false.
func (db *DB) SessionFromPort(ctx context.Context, q Querier, id int64, port int) (bool, error) {
	return db.Dialect.sessionFromPort(ctx, db, db.q(q), id, port)
}

// CancelStatement cancels the statement the session id is running, from q
// (nil: the pool; PostgreSQL pg_cancel_backend, MySQL KILL QUERY). A client
// that gives up a lock wait by closing its connection does not end the
// server's wait on MySQL: without this, the abandoned wait could still be
// granted the lock, and hold it until the server notices the closed
// connection.
func (db *DB) CancelStatement(ctx context.Context, q Querier, id int64) error {
	return db.Dialect.cancelStatement(ctx, db, db.q(q), id)
}

// KillSession ends the server session id from q (nil: the pool;
// PostgreSQL pg_terminate_backend, MySQL KILL CONNECTION), rolling back its
// transaction; a session already gone is not an error. SQLite has no
// sessions: nil.
func (db *DB) KillSession(ctx context.Context, q Querier, id int64) error {
	return db.Dialect.killSession(ctx, db, db.q(q), id)
}
