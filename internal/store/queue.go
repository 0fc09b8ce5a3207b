package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// QueueSQL holds the statements of the fair wait queue (dblock_waiters).
//
// Every statement numbers its bind parameters in the order they appear in
// the text, so one argument list serves every dialect, MySQL's positional ?
// included. A waiter is live while its expires_at (the heartbeat deadline) is
// later than the database clock; dead waiters are skipped by every statement
// here and removed by the reaper.
type QueueSQL struct {
	// Enqueue inserts a waiter (name, owner, heartbeat timeout µs) stamped by
	// the database clock. On PostgreSQL and SQLite it returns id and
	// created_at; on MySQL the id comes from LAST_INSERT_ID.
	Enqueue string
	// HeartbeatMany (timeout µs, then the ids, whose placeholders fill its
	// %s) is Heartbeat for many waiters at once.
	HeartbeatMany string
	// Heartbeat (timeout µs, id) extends a live waiter's deadline; a dead
	// waiter stays dead (it lost its place and must enqueue again).
	Heartbeat string
	// Check (name, name, id, name, name) reads, in one snapshot, whether the
	// waiter is live, how many live waiters are ahead of it, the heartbeat
	// deadline of the live waiter directly ahead of it, its created_at, the
	// lock row and the database clock.
	Check string
	// Peek (name, name) reads the number of live waiters of a name, the lock
	// row and the database clock.
	Peek string
	// Take (id) deletes a live waiter; it runs in the transaction that takes
	// the lock, so taking and leaving the queue commit together.
	Take string
	// Leave (id) deletes a waiter that gives up. On PostgreSQL it notifies
	// the name, since the waiters behind it moved up.
	Leave string
	// Direct is the lease acquisition of LeaseSQL.Acquire guarded by the
	// queue, in the same statement: it takes nothing while a live waiter
	// queues for the name, unless the owner holds the name already
	// (reentry). On PostgreSQL it returns Acquire's columns and the number
	// of live waiters; on SQLite, Acquire's (no row when refused). Empty on
	// MySQL (see Jumped).
	Direct string
	// Jumped (name, owner, version) reads, after a MySQL acquisition, the
	// row's reentry count and how many live waiters were created no later
	// than the lease was acquired, that is, queued before the acquisition
	// began. MySQL only: its INSERT ... SELECT reads the queue with shared
	// next-key locks under REPEATABLE READ, which a no-wait acquisition
	// cannot take while any neighbouring waiter row is being written, so the
	// guard runs as a lockless read right after the acquisition instead.
	Jumped string
}

// The queue's statements, written out per dialect. PostgreSQL's enqueue
// takes created_at from clock_timestamp() (the column default), the time of
// the insert itself rather than of its transaction's start. MariaDB's are
// MySQL's.
var pgQueue = QueueSQL{
	Enqueue: `INSERT INTO dblock_waiters (name, owner, expires_at)
VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 microsecond')
RETURNING id, (extract(epoch FROM created_at) * 1000000)::bigint`,

	Heartbeat: `UPDATE dblock_waiters SET heartbeat_at = now(), expires_at = now() + $1::bigint * interval '1 microsecond'
WHERE id = $2 AND expires_at > now()`,

	HeartbeatMany: `UPDATE dblock_waiters SET heartbeat_at = now(), expires_at = now() + $1::bigint * interval '1 microsecond'
WHERE expires_at > now() AND id IN (%s)`,

	Check: `SELECT
    CASE WHEN me.id IS NULL THEN 0 ELSE 1 END,
    CASE WHEN me.id IS NULL THEN 0 ELSE (
        SELECT COUNT(*) FROM dblock_waiters w
        WHERE w.name = $1 AND w.expires_at > now()
          AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
    ) END,
    CASE WHEN me.id IS NULL THEN 0 ELSE COALESCE((
        SELECT (extract(epoch FROM w.expires_at) * 1000000)::bigint FROM dblock_waiters w
        WHERE w.name = $2 AND w.expires_at > now()
          AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
        ORDER BY w.created_at DESC, w.id DESC
        LIMIT 1
    ), 0) END,
    COALESCE((extract(epoch FROM me.created_at) * 1000000)::bigint, 0),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE((extract(epoch FROM l.expires_at) * 1000000)::bigint, 0), (extract(epoch FROM now()) * 1000000)::bigint
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_waiters me ON me.id = $3 AND me.name = $4 AND me.expires_at > now()
LEFT JOIN dblock_locks l ON l.name = $5`,

	Peek: `SELECT
    (SELECT COUNT(*) FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now()),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE((extract(epoch FROM l.expires_at) * 1000000)::bigint, 0), (extract(epoch FROM now()) * 1000000)::bigint
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_locks l ON l.name = $2`,

	Take: `DELETE FROM dblock_waiters WHERE id = $1 AND expires_at > now()`,

	Leave: `DELETE FROM dblock_waiters WHERE id = $1
RETURNING pg_notify('dblock', name)::text IS NOT NULL`,

	Direct: `WITH cur AS (
    SELECT name FROM dblock_locks
    WHERE name = $1 AND (owner IS NULL OR owner = $2 OR expires_at <= now())
      AND (owner = $2 AND expires_at > now() OR NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now()))
    FOR UPDATE SKIP LOCKED
), upd AS (
    UPDATE dblock_locks l SET
        reentry     = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.reentry + 1 ELSE 1 END,
        version     = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.version ELSE nextval('dblock_token_seq') END,
        mode        = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.mode ELSE $4 END,
        acquired_at = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.acquired_at ELSE now() END,
        metadata    = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.metadata ELSE $5 END,
        expires_at  = CASE WHEN l.owner = $2 AND l.expires_at > now()
                           THEN greatest(l.expires_at, now() + $3::bigint * interval '1 microsecond')
                           ELSE now() + $3::bigint * interval '1 microsecond' END,
        owner       = $2,
        updated_at  = now()
    FROM cur WHERE l.name = cur.name
    RETURNING l.version, l.reentry
), ins AS (
    INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
    SELECT $1, $2, 1, nextval('dblock_token_seq'), $4, now(), now() + $3::bigint * interval '1 microsecond', now(), $5
    WHERE NOT EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1) AND NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now())
    ON CONFLICT (name) DO NOTHING
    RETURNING version, reentry
), q AS (
    SELECT count(*) AS n FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now()
)
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, 0::bigint FROM upd
UNION ALL
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, 0::bigint FROM ins
UNION ALL
SELECT false, h.version, coalesce(h.owner, ''), coalesce(h.mode, ''), coalesce((extract(epoch FROM h.expires_at) * 1000000)::bigint, 0), (extract(epoch FROM now()) * 1000000)::bigint, 0, q.n
FROM dblock_locks h, q WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM cur)
UNION ALL
SELECT false, 0::bigint, '', '', 0::bigint, (extract(epoch FROM now()) * 1000000)::bigint, 0, q.n
FROM q WHERE NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1)
LIMIT 1`,
}

var mysqlQueue = QueueSQL{
	Enqueue: `INSERT INTO dblock_waiters (name, owner, created_at, heartbeat_at, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`,

	Heartbeat: `UPDATE dblock_waiters SET heartbeat_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE id = ? AND expires_at > UTC_TIMESTAMP(6)`,

	HeartbeatMany: `UPDATE dblock_waiters SET heartbeat_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE expires_at > UTC_TIMESTAMP(6) AND id IN (%s)`,

	Check: `SELECT
    CASE WHEN me.id IS NULL THEN 0 ELSE 1 END,
    CASE WHEN me.id IS NULL THEN 0 ELSE (
        SELECT COUNT(*) FROM dblock_waiters w
        WHERE w.name = ? AND w.expires_at > UTC_TIMESTAMP(6)
          AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
    ) END,
    CASE WHEN me.id IS NULL THEN 0 ELSE COALESCE((
        SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', w.expires_at) FROM dblock_waiters w
        WHERE w.name = ? AND w.expires_at > UTC_TIMESTAMP(6)
          AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
        ORDER BY w.created_at DESC, w.id DESC
        LIMIT 1
    ), 0) END,
    COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', me.created_at), 0),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at), 0), TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_waiters me ON me.id = ? AND me.name = ? AND me.expires_at > UTC_TIMESTAMP(6)
LEFT JOIN dblock_locks l ON l.name = ?`,

	Peek: `SELECT
    (SELECT COUNT(*) FROM dblock_waiters w WHERE w.name = ? AND w.expires_at > UTC_TIMESTAMP(6)),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at), 0), TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_locks l ON l.name = ?`,

	Take: `DELETE FROM dblock_waiters WHERE id = ? AND expires_at > UTC_TIMESTAMP(6)`,

	Leave: `DELETE FROM dblock_waiters WHERE id = ?`,

	Jumped: `SELECT l.reentry, (
    SELECT COUNT(*) FROM dblock_waiters w
    WHERE w.name = l.name AND w.expires_at > UTC_TIMESTAMP(6) AND w.created_at <= l.acquired_at
)
FROM dblock_locks l WHERE l.name = ? AND l.owner = ? AND l.version = ?`,
}

var mariadbQueue = mysqlQueue

var sqliteQueue = QueueSQL{
	Enqueue: `INSERT INTO dblock_waiters (name, owner, created_at, heartbeat_at, expires_at)
VALUES (?1, ?2, CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?3)
RETURNING id, created_at`,

	Heartbeat: `UPDATE dblock_waiters SET heartbeat_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER), expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?1
WHERE id = ?2 AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)`,

	HeartbeatMany: `UPDATE dblock_waiters SET heartbeat_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER), expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?1
WHERE expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) AND id IN (%s)`,

	Check: `SELECT
    CASE WHEN me.id IS NULL THEN 0 ELSE 1 END,
    CASE WHEN me.id IS NULL THEN 0 ELSE (
        SELECT COUNT(*) FROM dblock_waiters w
        WHERE w.name = ?1 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)
          AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
    ) END,
    CASE WHEN me.id IS NULL THEN 0 ELSE COALESCE((
        SELECT w.expires_at FROM dblock_waiters w
        WHERE w.name = ?2 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)
          AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
        ORDER BY w.created_at DESC, w.id DESC
        LIMIT 1
    ), 0) END,
    COALESCE(me.created_at, 0),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE(l.expires_at, 0), CAST(unixepoch('subsec') * 1000000 AS INTEGER)
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_waiters me ON me.id = ?3 AND me.name = ?4 AND me.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)
LEFT JOIN dblock_locks l ON l.name = ?5`,

	Peek: `SELECT
    (SELECT COUNT(*) FROM dblock_waiters w WHERE w.name = ?1 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE(l.expires_at, 0), CAST(unixepoch('subsec') * 1000000 AS INTEGER)
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_locks l ON l.name = ?2`,

	Take: `DELETE FROM dblock_waiters WHERE id = ?1 AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)`,

	Leave: `DELETE FROM dblock_waiters WHERE id = ?1`,

	Direct: `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
SELECT ?1, ?2, 1, (SELECT floor + 1 FROM dblock_fence WHERE id = 1), ?4, CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?3, CAST(unixepoch('subsec') * 1000000 AS INTEGER), ?5
WHERE NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = ?1 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER))
   OR EXISTS (SELECT 1 FROM dblock_locks l WHERE l.name = ?1 AND l.owner = ?2 AND l.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER))
ON CONFLICT (name) DO UPDATE SET
    reentry     = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN reentry + 1 ELSE 1 END,
    version     = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN version ELSE max(version + 1, excluded.version) END,
    mode        = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN mode ELSE excluded.mode END,
    acquired_at = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN acquired_at ELSE excluded.acquired_at END,
    metadata    = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN metadata ELSE excluded.metadata END,
    expires_at  = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN max(expires_at, excluded.expires_at) ELSE excluded.expires_at END,
    owner       = excluded.owner,
    updated_at  = excluded.updated_at
WHERE owner IS NULL OR owner = excluded.owner OR expires_at <= CAST(unixepoch('subsec') * 1000000 AS INTEGER)
RETURNING version, reentry`,
}

// pgDirect is pgLease.Acquire guarded by the queue: the row is taken, or
// inserted, only while no live waiter queues for the name (or the owner
// holds it already), and an eighth column counts the live waiters. Its
// snapshot is the statement's: a waiter whose insert committed before the
// statement began is seen, so nobody jumps it.
const pgDirect = `WITH cur AS (
    SELECT name FROM dblock_locks
    WHERE name = $1 AND (owner IS NULL OR owner = $2 OR expires_at <= now())
      AND (owner = $2 AND expires_at > now() OR NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now()))
    FOR UPDATE SKIP LOCKED
), upd AS (
    UPDATE dblock_locks l SET
        reentry     = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.reentry + 1 ELSE 1 END,
        version     = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.version ELSE nextval('dblock_token_seq') END,
        mode        = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.mode ELSE $4 END,
        acquired_at = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.acquired_at ELSE now() END,
        metadata    = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.metadata ELSE $5 END,
        expires_at  = CASE WHEN l.owner = $2 AND l.expires_at > now()
                           THEN greatest(l.expires_at, now() + $3::bigint * interval '1 microsecond')
                           ELSE now() + $3::bigint * interval '1 microsecond' END,
        owner       = $2,
        updated_at  = now()
    FROM cur WHERE l.name = cur.name
    RETURNING l.version, l.reentry
), ins AS (
    INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
    SELECT $1, $2, 1, nextval('dblock_token_seq'), $4, now(), now() + $3::bigint * interval '1 microsecond', now(), $5
    WHERE NOT EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1) AND NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now())
    ON CONFLICT (name) DO NOTHING
    RETURNING version, reentry
), q AS (
    SELECT count(*) AS n FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now()
)
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, 0::bigint FROM upd
UNION ALL
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, 0::bigint FROM ins
UNION ALL
SELECT false, h.version, coalesce(h.owner, ''), coalesce(h.mode, ''), coalesce((extract(epoch FROM h.expires_at) * 1000000)::bigint, 0), (extract(epoch FROM now()) * 1000000)::bigint, 0, q.n
FROM dblock_locks h, q WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM cur)
UNION ALL
SELECT false, 0::bigint, '', '', 0::bigint, (extract(epoch FROM now()) * 1000000)::bigint, 0, q.n
FROM q WHERE NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1)
LIMIT 1`

// sqliteDirect is sqliteLease.Acquire guarded by the queue: it inserts (or
// upserts) nothing while a live waiter queues for the name, unless the owner
// holds it. SQLite has one writer, so nothing can enqueue in between.
const sqliteDirect = `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
SELECT ?1, ?2, 1, (SELECT floor + 1 FROM dblock_fence WHERE id = 1), ?4, CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?3, CAST(unixepoch('subsec') * 1000000 AS INTEGER), ?5
WHERE NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = ?1 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER))
   OR EXISTS (SELECT 1 FROM dblock_locks l WHERE l.name = ?1 AND l.owner = ?2 AND l.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER))
ON CONFLICT (name) DO UPDATE SET
    reentry     = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN reentry + 1 ELSE 1 END,
    version     = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN version ELSE max(version + 1, excluded.version) END,
    mode        = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN mode ELSE excluded.mode END,
    acquired_at = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN acquired_at ELSE excluded.acquired_at END,
    metadata    = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN metadata ELSE excluded.metadata END,
    expires_at  = CASE WHEN owner = excluded.owner AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) THEN max(expires_at, excluded.expires_at) ELSE excluded.expires_at END,
    owner       = excluded.owner,
    updated_at  = excluded.updated_at
WHERE owner IS NULL OR owner = excluded.owner OR expires_at <= CAST(unixepoch('subsec') * 1000000 AS INTEGER)
RETURNING version, reentry`

const mysqlJumped = `SELECT l.reentry, (
    SELECT COUNT(*) FROM dblock_waiters w
    WHERE w.name = l.name AND w.expires_at > UTC_TIMESTAMP(6) AND w.created_at <= l.acquired_at
)
FROM dblock_locks l WHERE l.name = ? AND l.owner = ? AND l.version = ?`

// ---- operations ----

// WaiterTicket identifies an enqueued waiter.
type WaiterTicket struct {
	ID int64
	// CreatedAt is the database clock at the insert; zero on MySQL, which
	// cannot return it from the insert (QueueCheck reports it).
	CreatedAt time.Time
}

// QueueState is a name's queue and lock row as one statement saw them.
type QueueState struct {
	// Live reports whether the checked waiter is still live (Check only).
	Live bool
	// Ahead counts the live waiters ahead of the checked waiter (Check), or
	// all live waiters of the name (Peek).
	Ahead int
	// CreatedAt is the checked waiter's created_at (Check only; zero when dead).
	CreatedAt time.Time
	// AheadExpiresAt is the heartbeat deadline of the live waiter directly
	// ahead of the checked one (Check only; zero when none is ahead): if
	// that waiter died, the checked one moves up then. Compare it with
	// Holder.Now, the database clock.
	AheadExpiresAt time.Time
	// Holder is the lock row; Holder.Now is the database clock.
	Holder Holder
}

// Enqueue inserts a waiter for (name, owner) whose heartbeat deadline is
// timeout from the database's now.
func (db *DB) Enqueue(ctx context.Context, q Querier, name, owner string, timeout time.Duration) (t WaiterTicket, err error) {
	err = db.onPoolShortBusy(ctx, q, func(q Querier) error {
		t, err = db.enqueue(ctx, q, name, owner, timeout)
		return err
	})
	return t, err
}

func (db *DB) enqueue(ctx context.Context, q Querier, name, owner string, timeout time.Duration) (WaiterTicket, error) {
	sqlText := db.Dialect.Queue().Enqueue
	if db.Dialect.Kind() == MySQL {
		r, err := q.ExecContext(ctx, sqlText, name, owner, timeout.Microseconds())
		if err != nil {
			return WaiterTicket{}, db.Classify(err)
		}
		id, err := r.LastInsertId()
		if err != nil {
			return WaiterTicket{}, err
		}
		return WaiterTicket{ID: id}, nil
	}
	var t WaiterTicket
	var us int64
	if err := q.QueryRowxContext(ctx, sqlText, name, owner, timeout.Microseconds()).Scan(&t.ID, &us); err != nil {
		return WaiterTicket{}, db.Classify(err)
	}
	t.CreatedAt = Micros(us)
	return t, nil
}

// HeartbeatWaiter extends waiter id's deadline to timeout from the database's
// now. It reports false when the waiter is gone or already dead.
func (db *DB) HeartbeatWaiter(ctx context.Context, q Querier, id int64, timeout time.Duration) (ok bool, err error) {
	err = db.onPoolShortBusy(ctx, q, func(q Querier) error {
		ok, err = db.execOne(ctx, q, db.Dialect.Queue().Heartbeat, timeout.Microseconds(), id)
		return err
	})
	return ok, err
}

// maxHeartbeatBatch bounds the ids of one HeartbeatWaiters statement.
const maxHeartbeatBatch = 500

// HeartbeatWaiters extends the deadlines of the live waiters among ids (one
// statement per 500 ids) and returns how many it extended. Dead waiters stay
// dead: each learns it from CheckWaiter.
func (db *DB) HeartbeatWaiters(ctx context.Context, q Querier, ids []int64, timeout time.Duration) (n int, err error) {
	err = db.onPoolShortBusy(ctx, q, func(q Querier) error {
		n, err = db.heartbeatWaiters(ctx, q, ids, timeout)
		return err
	})
	return n, err
}

func (db *DB) heartbeatWaiters(ctx context.Context, q Querier, ids []int64, timeout time.Duration) (int, error) {
	total := 0
	for len(ids) > 0 {
		batch := ids[:min(len(ids), maxHeartbeatBatch)]
		ids = ids[len(batch):]
		ph := make([]string, len(batch))
		args := make([]any, 0, len(batch)+1)
		args = append(args, timeout.Microseconds())
		for i, id := range batch {
			ph[i] = db.Dialect.Placeholder(i + 2)
			args = append(args, id)
		}
		r, err := q.ExecContext(ctx, fmt.Sprintf(db.Dialect.Queue().HeartbeatMany, strings.Join(ph, ", ")), args...)
		if err != nil {
			return total, db.Classify(err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return total, err
		}
		total += int(n)
	}
	return total, nil
}

// CheckWaiter reads, in one statement, whether waiter id of name is live, how
// many live waiters are ahead of it, and the lock row.
func (db *DB) CheckWaiter(ctx context.Context, q Querier, name string, id int64) (QueueState, error) {
	var s QueueState
	var live, exists int
	var crUs, aheadUs, expUs, nowUs int64
	var owner, mode []byte
	err := db.q(q).QueryRowxContext(ctx, db.Dialect.Queue().Check, name, name, id, name, name).
		Scan(&live, &s.Ahead, &aheadUs, &crUs, &exists, &owner, &s.Holder.Version, &mode, &expUs, &nowUs)
	if err != nil {
		return QueueState{}, db.Classify(err)
	}
	s.Live = live != 0
	if crUs != 0 {
		s.CreatedAt = Micros(crUs)
	}
	if aheadUs != 0 {
		s.AheadExpiresAt = Micros(aheadUs)
	}
	s.Holder = holderFrom(exists != 0, owner, s.Holder.Version, mode, expUs, nowUs)
	return s, nil
}

// PeekQueue reads the number of live waiters of name and the lock row.
func (db *DB) PeekQueue(ctx context.Context, q Querier, name string) (QueueState, error) {
	var s QueueState
	var exists int
	var expUs, nowUs, version int64
	var owner, mode []byte
	err := db.q(q).QueryRowxContext(ctx, db.Dialect.Queue().Peek, name, name).
		Scan(&s.Ahead, &exists, &owner, &version, &mode, &expUs, &nowUs)
	if err != nil {
		return QueueState{}, db.Classify(err)
	}
	s.Holder = holderFrom(exists != 0, owner, version, mode, expUs, nowUs)
	return s, nil
}

func holderFrom(exists bool, owner []byte, version int64, mode []byte, expUs, nowUs int64) Holder {
	h := Holder{Exists: exists, Owner: string(owner), Version: version, Mode: string(mode), Now: Micros(nowUs)}
	if expUs != 0 {
		h.ExpiresAt = Micros(expUs)
	}
	return h
}

// TakeWaiter deletes waiter id if it is still live. Run it in the
// transaction that takes the lock (AcquireLease on the same *sqlx.Tx): false
// means the waiter died meanwhile and the transaction must be rolled back.
func (db *DB) TakeWaiter(ctx context.Context, tx Querier, id int64) (bool, error) {
	return db.execOne(ctx, db.q(tx), db.Dialect.Queue().Take, id)
}

// LeaveQueue deletes waiter id, live or dead, and reports whether it was
// there. On PostgreSQL the waiters of its name are notified.
func (db *DB) LeaveQueue(ctx context.Context, q Querier, id int64) (left bool, err error) {
	err = db.onPoolShortBusy(ctx, q, func(q Querier) error {
		left, err = db.leaveQueue(ctx, q, id)
		return err
	})
	return left, err
}

func (db *DB) leaveQueue(ctx context.Context, q Querier, id int64) (bool, error) {
	if db.Dialect.Kind() == Postgres {
		var notified bool
		err := q.QueryRowxContext(ctx, db.Dialect.Queue().Leave, id).Scan(&notified)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return err == nil, db.Classify(err)
	}
	return db.execOne(ctx, q, db.Dialect.Queue().Leave, id)
}
