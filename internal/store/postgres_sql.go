// PostgreSQL's statements, written out: those of leases ($1 name, $2 owner,
// $3 ttl µs or version, $4 mode, $5 metadata), row locks, the fair queue and
// the reaper ($1 limit, $2 age µs). Times are read as µs since the epoch
// (pgUs). Each statement's doc says what it binds and returns; the code
// that binds and reads it is PostgreSQL's engine (postgres_<concern>.go,
// or the concern's file where every database runs its statement alike).
// testdata/sql/postgres.sql holds them all as the server sees them.

package store

import "fmt"

const pgMicros = "(extract(epoch FROM %s) * 1000000)::bigint"

func pgUs(col string) string { return fmt.Sprintf(pgMicros, col) }

// The clauses shared by the acquire statements (pgLease.Acquire and
// pgDirect) and the reservation's (see reserve.go): pgTakeable, $2 may take
// the row (free, expired or its own, and no live reservation keeps it for
// another owner, a holder's re-entry aside); pgTakeReservation, the SET
// items of a take that end the reservation when it was $2's or lapsed;
// pgAdvisoryWrite, the settings of a reservation's write; pgNextCols, the
// reservation as Holder reads it (owner, since µs, until µs).
var (
	pgTakeable = `(owner IS NULL OR owner = $2 OR expires_at <= now())
      AND (owner = $2 AND expires_at > now() OR next_until IS NULL OR next_until <= now() OR next_owner = $2)`
	pgTakeReservation = `next_owner  = CASE WHEN l.next_owner = $2 OR l.next_until <= now() THEN NULL ELSE l.next_owner END,
        next_since  = CASE WHEN l.next_owner = $2 OR l.next_until <= now() THEN NULL ELSE l.next_since END,
        next_until  = CASE WHEN l.next_owner = $2 OR l.next_until <= now() THEN NULL ELSE l.next_until END,`
	pgAdvisoryWrite = `(SELECT set_config('synchronous_commit', 'off', true), set_config('lock_timeout', '100', true)) AS advisory`
	pgKeptForOther  = `l.next_until > now() AND l.next_owner <> $2`
	pgNextCols      = `coalesce(next_owner, ''), coalesce(` + pgUs("next_since") + `, 0), coalesce(` + pgUs("next_until") + `, 0)`
)

// pgTakeUpd is the upd CTE of the lease acquisitions (pgLease.Acquire,
// pgDirect, pgTakeHead): the row cur locked taken, or re-entered by $2 while
// its lease lasts.
var pgTakeUpd = `upd AS (
    UPDATE dblock_locks l SET
        reentry     = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.reentry + 1 ELSE 1 END,
        version     = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.version ELSE nextval('dblock_token_seq') END,
        mode        = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.mode ELSE $4 END,
        acquired_at = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.acquired_at ELSE now() END,
        metadata    = CASE WHEN l.owner = $2 AND l.expires_at > now() THEN l.metadata ELSE $5 END,
        expires_at  = CASE WHEN l.owner = $2 AND l.expires_at > now()
                           THEN greatest(l.expires_at, now() + $3::bigint * interval '1 microsecond')
                           ELSE now() + $3::bigint * interval '1 microsecond' END,
        ` + pgTakeReservation + `
        owner       = $2,
        updated_at  = now()
    FROM cur WHERE l.name = cur.name
    RETURNING l.version, l.reentry
`

// pgTakeIns is the ins CTE of the lease acquisitions: the row inserted,
// taken, when the name has none and cond (SQL appended to the WHERE) holds.
func pgTakeIns(cond string) string {
	return `ins AS (
    INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
    SELECT $1, $2, 1, nextval('dblock_token_seq'), $4, now(), now() + $3::bigint * interval '1 microsecond', now(), $5
    WHERE NOT EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1)` + cond + `
    ON CONFLICT (name) DO NOTHING
    RETURNING version, reentry
`
}

// pgLockedLease locks the row of the lease ($1, $2, $3) if unexpired, as
// the CTE cur, for an UPDATE that checks the expiry again on cur: a filter on
// the CTE's rows runs once the lock is held, with the clock of then. A
// check in the UPDATE's own WHERE runs before a wait for another
// transaction's lock and is not run again when that transaction ends without
// changing the row (a pessimistic holder that took the name once the lease
// ran out), and now() is the statement's start: the lease would be renewed
// after the other holder's section.
const pgLockedLease = `WITH cur AS (
    SELECT name, expires_at FROM dblock_locks
    WHERE name = $1 AND owner = $2 AND version = $3 AND expires_at > clock_timestamp()
    FOR NO KEY UPDATE
)
`

var pgLease = LeaseSQL{
	// cur locks the row only when it can be taken. SKIP LOCKED: a row that a
	// pessimistic transaction (or a racing acquire) has locked is passed
	// over at once, as a normal result rather than a server error (NOWAIT's
	// 55P03 costs an error round trip and a server log entry per lost race).
	// A failed attempt locks and writes nothing, so it needs no WAL flush.
	// ins covers a missing row. The last branch reports the row as it was
	// when nothing was taken; a takeable row there means it was locked.
	Acquire: `WITH cur AS (
    SELECT name FROM dblock_locks
    WHERE name = $1 AND ` + pgTakeable + `
    FOR UPDATE SKIP LOCKED
), ` + pgTakeUpd + `), ` + pgTakeIns("") + `)
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, '', 0::bigint, 0::bigint FROM upd
UNION ALL
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, '', 0::bigint, 0::bigint FROM ins
UNION ALL
SELECT false, h.version, coalesce(h.owner, ''), coalesce(h.mode, ''), coalesce(` + pgUs("h.expires_at") + `, 0), ` + pgUs("now()") + `, 0, ` + pgNextCols + `
FROM dblock_locks h WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM cur)
LIMIT 1`,

	// TakeFree is Acquire's fresh take alone (see LeaseSQL.TakeFree): the
	// row locked when free (no live lease, no other owner's live
	// reservation) and not locked by another transaction, then taken; no
	// row returned when nothing was taken. The lock is cur's FOR UPDATE,
	// not the update's own: an update that keeps the key locks FOR NO KEY
	// UPDATE, which a pessimistic shared hold's FOR KEY SHARE lets through.
	// (A plain update with a short lock_timeout, as MariaDB's, saves cur's
	// WAL record and about 5% of the statement by pgbench, and took names
	// that shared holds held: TestSharedMixedExclusion.)
	TakeFree: `WITH cur AS (
    SELECT name FROM dblock_locks
    WHERE name = $1 AND (owner IS NULL OR expires_at <= now())
      AND (next_until IS NULL OR next_until <= now() OR next_owner = $2)
    FOR UPDATE SKIP LOCKED
)
UPDATE dblock_locks l SET
    reentry     = 1,
    version     = nextval('dblock_token_seq'),
    mode        = $4,
    acquired_at = now(),
    metadata    = $5,
    expires_at  = now() + $3::bigint * interval '1 microsecond',
    ` + pgTakeReservation + `
    owner       = $2,
    updated_at  = now()
FROM cur WHERE l.name = cur.name
RETURNING l.version`,

	// A release lost in a crash only delays the next owner until the lease
	// expires, so it commits without waiting for the WAL flush.
	//
	// A holder that took the read lock too (shared_until, see SharedSQL)
	// hands the name to readers on its last release: owner '' and mode
	// read, the same token, until its read lease ends (a share: reader
	// NULL).
	//
	// A release that frees the name returns the owner of another owner's
	// live reservation ('' when none) and announces the name to that owner
	// alone (name, E'\x1f', owner: see keptfor.go). Else it announces the
	// name unless $4 (quiet: the releasing Locker's own next waiter takes
	// it, see LeaseSQL.ReleaseKept), and only while a waiter has marked the
	// row (listened_until, see listened.go): announcing costs every releasing
	// commit the server's notification lock. A name handed to readers is
	// announced always.
	Release: `UPDATE dblock_locks l SET
    reentry      = CASE WHEN l.reentry > 1 THEN l.reentry - 1 WHEN l.shared_until > now() THEN 1 ELSE 0 END,
    owner        = CASE WHEN l.reentry > 1 THEN l.owner WHEN l.shared_until > now() THEN '' END,
    expires_at   = CASE WHEN l.reentry > 1 THEN l.expires_at WHEN l.shared_until > now() THEN l.shared_until END,
    mode         = CASE WHEN l.reentry <= 1 AND l.shared_until > now() THEN '` + readMode + `' ELSE l.mode END,
    shared_until = CASE WHEN l.reentry > 1 THEN l.shared_until END,
    reader       = NULL,
    updated_at   = now()
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
WHERE l.name = $1 AND l.owner = $2 AND l.version = $3
RETURNING CASE WHEN l.reentry = 0 AND ` + pgKeptForOther + ` THEN
        pg_notify('` + NotifyChannel + `', l.name || E'\x1f' || l.next_owner)::text || l.next_owner
    WHEN l.reentry = 0 AND $4 THEN ''
    WHEN l.owner = '' OR (l.reentry = 0 AND l.listened_until > now()) THEN pg_notify('` + NotifyChannel + `', l.name)::text
    ELSE '' END`,
	ReleaseKept: true,

	// Renew and Proclaim lock the row before they check the expiry, by
	// the clock after the lock (see pgLockedLease).
	Renew: pgLockedLease + `UPDATE dblock_locks l SET
    expires_at = greatest(l.expires_at, clock_timestamp() + $4::bigint * interval '1 microsecond'),
    updated_at = now()
FROM cur WHERE l.name = cur.name AND cur.expires_at > clock_timestamp()
RETURNING true`,

	Holder: `SELECT coalesce(owner, ''), version, coalesce(mode, ''), coalesce(` + pgUs("expires_at") + `, 0), ` + pgUs("now()") + `, reentry,
    ` + pgNextCols + `
FROM dblock_locks WHERE name = $1`,

	// A reservation is advisory (see reserve.go): its writes commit
	// asynchronously, and wait at most 100 ms for the row (which a
	// pessimistic holder may keep locked). A reservation of a name that is
	// free by then (its release found no reservation, and its releaser's
	// next waiter may not take it) announces the name to the reserver.
	// Giving one up announces the name when it is free, for the waiters
	// the reservation kept out.
	Reserve: `UPDATE dblock_locks SET
    next_owner = $2,
    next_since = timestamptz 'epoch' + $3::bigint * interval '1 microsecond',
    next_until = now() + $4::bigint * interval '1 microsecond'
FROM ` + pgAdvisoryWrite + `
WHERE name = $1 AND (next_until IS NULL OR next_until <= now() OR next_owner = $2
    OR next_since > timestamptz 'epoch' + $3::bigint * interval '1 microsecond')
RETURNING (CASE WHEN owner IS NULL OR expires_at <= now() THEN pg_notify('` + NotifyChannel + `', name || E'\x1f' || $2)::text END) IS NOT NULL`,

	HandOver: pgLeaseHandOver,

	// A mark that has more than half of d left is not written again; the
	// answer is whether the row exists.
	MarkListened: `WITH m AS (
    UPDATE dblock_locks SET listened_until = now() + $2::bigint * interval '1 microsecond'
    FROM ` + pgAdvisoryWrite + `
    WHERE name = $1 AND (listened_until IS NULL OR listened_until < now() + $2::bigint / 2 * interval '1 microsecond')
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM m) OR EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1)`,

	Unreserve: `UPDATE dblock_locks SET next_owner = NULL, next_since = NULL, next_until = NULL
FROM ` + pgAdvisoryWrite + `
WHERE name = $1 AND next_owner = $2
RETURNING (CASE WHEN owner IS NULL OR expires_at <= now() THEN pg_notify('` + NotifyChannel + `', name)::text END) IS NOT NULL`,

	// FOR SHARE blocks every update of the row (a takeover, a release) until
	// the caller's transaction ends; clock_timestamp() because now() is the
	// transaction's start. So that a holder frozen inside that transaction
	// cannot keep the name past its lease, the same statement bounds the
	// transaction server-side: idle_in_transaction_session_timeout, local to
	// the transaction (set_config's is_local), becomes the lease's time left
	// by the database clock (at least 1 ms, since 0 turns it off), or the
	// session's own value if that is shorter. The server then ends the
	// session of a transaction left idle past the lease, and the rival
	// acquires. The value goes back to the session's at commit or rollback.
	Guard: `WITH g AS (
    SELECT expires_at FROM dblock_locks
    WHERE name = $1 AND owner = $2 AND version = $3 AND expires_at > clock_timestamp()
    FOR SHARE
)
SELECT (set_config('idle_in_transaction_session_timeout', least(
    greatest(1, ceil(extract(epoch FROM g.expires_at - clock_timestamp()) * 1000)),
    coalesce(nullif(ceil(extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000), 0), 2147483647)
)::bigint::text, true) IS NOT NULL)::int
FROM g WHERE g.expires_at > clock_timestamp()`,

	// mode NULL marks the row freed by an administrator (the history's
	// trigger reads it); a release keeps the mode.
	ForceRelease: `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, mode = NULL, shared_until = NULL, updated_at = now()
WHERE name = $1 AND owner IS NOT NULL
RETURNING pg_notify('` + NotifyChannel + `', name)::text IS NOT NULL`,

	Exists: `SELECT 1 FROM dblock_locks WHERE name = $1`,

	Proclaim: pgLockedLease + `UPDATE dblock_locks l SET metadata = $4, updated_at = now()
FROM cur WHERE l.name = cur.name AND cur.expires_at > clock_timestamp()`,
}

// pgLockCols are the columns every pessimistic lock statement returns: the
// row's lease columns, the database clock, and what identifies the locking
// session (see SessionRef): its backend pid and the start of its transaction
// (now(), which pg_stat_activity shows as xact_start while it lasts).
var pgLockCols = `coalesce(l.owner, ''), coalesce(l.mode, ''), coalesce(` + pgUs("l.expires_at") + `, 0), ` +
	pgUs("clock_timestamp()") + `, pg_backend_pid(), ` + pgUs("now()") + `, 0::bigint`

// pgRowLock sets the transaction's idle bound ($2, ms) and lock timeout ($3,
// ms, '0' = none) in a FROM item: the row lock is taken above the join, after
// set_config ran, so the wait is already bounded. Both settings are LOCAL.
var pgRowLock = pgRowLockFrom + `FOR UPDATE OF l`

var pgRowLockFrom = `SELECT ` + pgLockCols + `
FROM dblock_locks l,
     (SELECT set_config('idle_in_transaction_session_timeout', $2, true),
             set_config('lock_timeout', $3, true)) AS cfg
WHERE l.name = $1
`

// pgRowLockNoWait sets only the idle bound ($2): NOWAIT needs no lock
// timeout, and a LOCAL lock_timeout would stay on the caller's transaction.
var pgRowLockNoWait = pgRowLockNoWaitFrom + `FOR UPDATE OF l NOWAIT`

var pgRowLockNoWaitFrom = `SELECT ` + pgLockCols + `
FROM dblock_locks l,
     (SELECT set_config('idle_in_transaction_session_timeout', $2, true)) AS cfg
WHERE l.name = $1
`

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
	Lock:             pgRowLock,
	LockNoWait:       pgRowLockNoWait,
	LockShared:       pgRowLockFrom + `FOR KEY SHARE OF l`,
	LockSharedNoWait: pgRowLockNoWaitFrom + `FOR KEY SHARE OF l NOWAIT`,
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

// The queue's statements, written out per dialect. PostgreSQL's enqueue
// takes created_at from clock_timestamp() (the column default), the time of
// the insert itself rather than of its transaction's start, and commits
// without waiting for the WAL flush: a waiter's row lost in a crash of the
// server is found gone by the waiter's next check, and it joins again (as
// after a missed heartbeat); a contended name's takes, which are durable,
// then do not queue behind every enqueue's flush. MariaDB's are MySQL's
// but for two procedure calls (mariadbQueue).
var pgQueue = QueueSQL{
	Enqueue: `INSERT INTO dblock_waiters (name, owner, kind, expires_at)
SELECT $1, $2, $3, clock_timestamp() + $4::bigint * interval '1 microsecond'
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
RETURNING id, (extract(epoch FROM created_at) * 1000000)::bigint`,

	// EnqueueCheck is Enqueue with Check's answer for the new waiter; the
	// count (dblock_queue_ahead, a STABLE function) reads the statement's
	// snapshot, as Check's own statement does.
	EnqueueCheck: `WITH ins AS (
    INSERT INTO dblock_waiters (name, owner, kind, expires_at)
    SELECT $1, $2, $3, clock_timestamp() + $4::bigint * interval '1 microsecond'
    FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
    RETURNING id, created_at
)
SELECT ins.id, 1, COALESCE(a.ahead, 0), COALESCE(` + pgUs("a.ahead_expires_at") + `, 0), ` + pgUs("ins.created_at") + `,
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE(` + pgUs("l.expires_at") + `, 0), ` + pgUs("now()") + `
FROM ins
LEFT JOIN LATERAL dblock_queue_ahead($1, $3, ins.created_at, ins.id) a ON true
LEFT JOIN dblock_locks l ON l.name = $1`,

	Heartbeat: `UPDATE dblock_waiters SET heartbeat_at = now(), expires_at = now() + $1::bigint * interval '1 microsecond'
WHERE id = $2 AND expires_at > now()`,

	HeartbeatMany: `UPDATE dblock_waiters SET heartbeat_at = now(), expires_at = now() + $1::bigint * interval '1 microsecond'
WHERE expires_at > now() AND id IN (%s)`,

	// Check (name, id): the waiters ahead are counted by
	// dblock_queue_ahead (migration 00016), whose index scans mark the
	// entries of deleted waiters dead, which a bitmap scan never does.
	Check: `SELECT
    CASE WHEN me.id IS NULL THEN 0 ELSE 1 END, COALESCE(a.ahead, 0), COALESCE(` + pgUs("a.ahead_expires_at") + `, 0),
    COALESCE(` + pgUs("me.created_at") + `, 0),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE(` + pgUs("l.expires_at") + `, 0), ` + pgUs("now()") + `
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_waiters me ON me.id = $2 AND me.name = $1 AND me.expires_at > now()
LEFT JOIN LATERAL dblock_queue_ahead(me.name, 'exclusive', me.created_at, me.id) a ON true
LEFT JOIN dblock_locks l ON l.name = $1`,

	Peek: `SELECT
    (SELECT COUNT(*) FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now() AND w.kind <> 'semaphore'),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE((extract(epoch FROM l.expires_at) * 1000000)::bigint, 0), (extract(epoch FROM now()) * 1000000)::bigint
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_locks l ON l.name = $2`,

	Take: `DELETE FROM dblock_waiters WHERE id = $1 AND expires_at > now()`,

	Leave: `DELETE FROM dblock_waiters WHERE id = $1
RETURNING pg_notify('dblock', name)::text IS NOT NULL`,

	Direct: pgDirect,

	TakeHead: pgTakeHead,

	HandOver: pgHandOver,

	GatePeek: pgGatePeek, GateCheck: pgGateCheck,
}

// pgGateCheck is gateSQL's check with the waiters ahead counted by
// dblock_queue_ahead (migration 00016), whose index scans mark the
// entries of deleted waiters dead; the peek, a bitmap scan, then skips them.
var pgGatePeek, _ = gateSQL("now()", postgres{}.Placeholder)

var pgGateCheck = `SELECT COUNT(me.id), COALESCE(MAX(a.ahead), 0)
FROM dblock_waiters me
LEFT JOIN LATERAL dblock_queue_ahead(me.name, me.kind, me.created_at, me.id) a ON true
WHERE me.id = $1 AND me.expires_at > now()`

// pgTakeHead is pgLease.Acquire for waiter $6 at the head of the queue,
// with its row's delete. alive reads the waiter's row, live; seen keeps it
// only while no live waiter is ahead of it (pgNoneAhead, the check's
// count being zero), so a waiter whose last check is not fresh never
// takes over one that joined before it; row_ locks the lock row only when
// it can be taken and the waiter is live and first; me then locks the
// waiter's row, first too (on a name without a row, me alone decides the
// insert; a reaper's delete of the row waits, or has won and me is empty),
// so an attempt while the lock is held locks and writes nothing.
// The lock is taken only with me, and del deletes the waiter's row only
// with a take: the take and the queue's change commit together, as in the
// transaction of Acquire and Take. The eleventh column says whether the
// waiter was live.
var pgTakeHead = `WITH alive AS (
    SELECT id, created_at FROM dblock_waiters WHERE id = $6 AND name = $1 AND expires_at > now()
), seen AS (
    SELECT me.id FROM alive me WHERE ` + pgNoneAhead + `
), row_ AS (
    SELECT name FROM dblock_locks
    WHERE name = $1 AND ` + pgTakeable + ` AND EXISTS (SELECT 1 FROM seen)
    FOR UPDATE SKIP LOCKED
), me AS (
    SELECT id FROM dblock_waiters
    WHERE id = $6 AND name = $1 AND expires_at > now() AND EXISTS (SELECT 1 FROM seen)
      AND (EXISTS (SELECT 1 FROM row_) OR NOT EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1))
    FOR UPDATE
), cur AS (
    SELECT name FROM row_ WHERE EXISTS (SELECT 1 FROM me)
), ` + pgTakeUpd + `), ` + pgTakeIns(` AND EXISTS (SELECT 1 FROM me)`) + `), del AS (
    DELETE FROM dblock_waiters w USING me
    WHERE w.id = me.id AND (EXISTS (SELECT 1 FROM upd) OR EXISTS (SELECT 1 FROM ins))
)
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, '', 0::bigint, 0::bigint, true FROM upd
UNION ALL
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, '', 0::bigint, 0::bigint, true FROM ins
UNION ALL
SELECT false, h.version, coalesce(h.owner, ''), coalesce(h.mode, ''), coalesce(` + pgUs("h.expires_at") + `, 0), ` + pgUs("now()") + `, 0, ` + pgNextCols + `,
       EXISTS (SELECT 1 FROM alive)
FROM dblock_locks h WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM cur)
UNION ALL
SELECT false, 0::bigint, '', '', 0::bigint, ` + pgUs("now()") + `, 0, '', 0::bigint, 0::bigint, EXISTS (SELECT 1 FROM alive)
WHERE NOT EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1) AND NOT EXISTS (SELECT 1 FROM ins)
LIMIT 1`

// pgDirect is pgLease.Acquire guarded by the queue: the row is taken, or
// inserted, only while no live waiter queues for the name (or the owner
// holds it already), and an eighth column counts the live waiters. Its
// snapshot is the statement's: a waiter whose insert committed before the
// statement began is seen, so nobody jumps it.
var pgDirect = `WITH cur AS (
    SELECT name FROM dblock_locks
    WHERE name = $1 AND ` + pgTakeable + `
      AND (owner = $2 AND expires_at > now() OR NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now() AND w.kind <> 'semaphore'))
    FOR UPDATE SKIP LOCKED
), ` + pgTakeUpd + `), ` + pgTakeIns(` AND NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now() AND w.kind <> 'semaphore')`) + `), q AS (
    SELECT count(*) AS n FROM dblock_waiters w WHERE w.name = $1 AND w.expires_at > now() AND w.kind <> 'semaphore'
)
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, '', 0::bigint, 0::bigint, 0::bigint FROM upd
UNION ALL
SELECT true, version, '', '', 0::bigint, 0::bigint, reentry, '', 0::bigint, 0::bigint, 0::bigint FROM ins
UNION ALL
SELECT false, h.version, coalesce(h.owner, ''), coalesce(h.mode, ''), coalesce((extract(epoch FROM h.expires_at) * 1000000)::bigint, 0), (extract(epoch FROM now()) * 1000000)::bigint, 0,
       ` + pgNextCols + `, q.n
FROM dblock_locks h, q WHERE h.name = $1 AND NOT EXISTS (SELECT 1 FROM cur)
UNION ALL
SELECT false, 0::bigint, '', '', 0::bigint, (extract(epoch FROM now()) * 1000000)::bigint, 0, '', 0::bigint, 0::bigint, q.n
FROM q WHERE NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM dblock_locks WHERE name = $1)
LIMIT 1`

var pgReap = ReapSQL{
	FreeExpired: `WITH c AS (
    SELECT name FROM dblock_locks
    WHERE owner IS NOT NULL AND expires_at <= now()
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), f AS (
    UPDATE dblock_locks l SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = now()
    FROM c
    WHERE l.name = c.name AND l.owner IS NOT NULL AND l.expires_at <= now()
    RETURNING pg_notify('` + NotifyChannel + `', l.name)::text IS NOT NULL AS notified
)
SELECT count(*) FILTER (WHERE notified) FROM f`,

	DeleteWaiters: `WITH c AS (
    SELECT id FROM dblock_waiters
    WHERE expires_at <= now() - $2::bigint * interval '1 microsecond'
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), d AS (
    DELETE FROM dblock_waiters w USING c
    WHERE w.id = c.id AND w.expires_at <= now() - $2::bigint * interval '1 microsecond'
    RETURNING w.name
), g AS (
    SELECT count(*) AS n, pg_notify('` + NotifyChannel + `', name)::text IS NOT NULL AS notified
    FROM d GROUP BY name
)
SELECT coalesce(sum(n) FILTER (WHERE notified), 0)::bigint FROM g`,

	DeleteIdle: `WITH c AS (
    SELECT name FROM dblock_locks
    WHERE owner IS NULL AND updated_at <= now() - $2::bigint * interval '1 microsecond'
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), d AS (
    DELETE FROM dblock_locks l USING c
    WHERE l.name = c.name AND l.owner IS NULL AND l.updated_at <= now() - $2::bigint * interval '1 microsecond'
    RETURNING 1
)
SELECT count(*) FROM d`,

	Gauges: `SELECT
    (SELECT count(*) FROM dblock_locks WHERE owner IS NOT NULL AND expires_at > now()),
    (SELECT count(*) FROM dblock_waiters WHERE expires_at > now()),
    (SELECT count(*) FROM dblock_waiters WHERE expires_at <= now()),
    coalesce((SELECT ` + pgUs("now()") + ` - ` + pgUs("min(expires_at)") + `
              FROM dblock_locks WHERE owner IS NOT NULL AND expires_at <= now()), 0)`,
}

// pgHistoryEnd names how an acquisition ended, in the history's trigger: a
// new owner took the row (after its expiry), an administrator freed it
// (ForceRelease clears the mode), it had expired (the reaper, or a late
// release), or it was released.
const pgHistoryEnd = `CASE WHEN NEW.owner = '' AND NEW.version = OLD.version THEN 'released'
             WHEN NEW.owner IS NOT NULL AND NEW.owner <> OLD.owner THEN 'taken_over'
             WHEN NEW.owner IS NULL AND NEW.mode IS NULL THEN 'force_released'
             WHEN OLD.expires_at <= clock_timestamp() THEN 'expired'
             ELSE 'released' END`

var pgHistory = HistorySQL{
	// The trigger on dblock_locks fires only when an acquisition ends: the
	// row had an owner, and the owner or the token changed (renewals and
	// re-entries change neither). A readers' period (owner '') is not an
	// acquisition, but the reader recorded in the row (its column reader,
	// see SharedSQL) is one, recorded as the row's owner; every other
	// reader's is its share, recorded when the share is deleted (released,
	// or reaped after its expiry) or replaced by a share of a later period;
	// a semaphore grant when it is deleted. Each writes in the statement
	// that ends the acquisition. PostgreSQL migration 00017 replaces an
	// installed trigger with this one.
	Enable: []string{`CREATE OR REPLACE FUNCTION dblock_history_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
    VALUES (OLD.name, CASE WHEN OLD.owner = '' THEN OLD.reader ELSE OLD.owner END, OLD.version, OLD.mode, OLD.acquired_at,
        clock_timestamp(), ` + pgHistoryEnd + `, OLD.metadata);
    RETURN NULL;
END
$$`,
		`CREATE OR REPLACE FUNCTION dblock_history_record_grant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'dblock_shares' THEN
        INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
        VALUES (OLD.name, OLD.owner, OLD.token, '` + readMode + `', OLD.acquired_at, clock_timestamp(),
            CASE WHEN OLD.expires_at <= clock_timestamp() THEN 'expired' ELSE 'released' END, OLD.metadata);
    ELSE
        INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
        VALUES (OLD.name, OLD.owner, OLD.id, 'semaphore', OLD.acquired_at, clock_timestamp(),
            CASE WHEN OLD.expires_at <= clock_timestamp() THEN 'expired' ELSE 'released' END, OLD.metadata);
    END IF;
    RETURN NULL;
END
$$`,
		`DROP TRIGGER IF EXISTS dblock_history_ended ON dblock_locks`,
		`CREATE TRIGGER dblock_history_ended AFTER UPDATE ON dblock_locks FOR EACH ROW
WHEN (OLD.owner IS NOT NULL AND (OLD.owner <> '' OR OLD.reader IS NOT NULL) AND (NEW.owner IS DISTINCT FROM OLD.owner OR NEW.version <> OLD.version))
EXECUTE FUNCTION dblock_history_record()`,
		`DROP TRIGGER IF EXISTS dblock_history_share_ended ON dblock_shares`,
		`CREATE TRIGGER dblock_history_share_ended AFTER DELETE ON dblock_shares FOR EACH ROW
EXECUTE FUNCTION dblock_history_record_grant()`,
		`DROP TRIGGER IF EXISTS dblock_history_share_replaced ON dblock_shares`,
		`CREATE TRIGGER dblock_history_share_replaced AFTER UPDATE ON dblock_shares FOR EACH ROW
WHEN (NEW.token <> OLD.token)
EXECUTE FUNCTION dblock_history_record_grant()`,
		`DROP TRIGGER IF EXISTS dblock_history_grant_ended ON dblock_permits`,
		`CREATE TRIGGER dblock_history_grant_ended AFTER DELETE ON dblock_permits FOR EACH ROW
EXECUTE FUNCTION dblock_history_record_grant()`,
	},
	Disable: []string{
		`DROP TRIGGER IF EXISTS dblock_history_ended ON dblock_locks`,
		`DROP TRIGGER IF EXISTS dblock_history_share_ended ON dblock_shares`,
		`DROP TRIGGER IF EXISTS dblock_history_share_replaced ON dblock_shares`,
		`DROP TRIGGER IF EXISTS dblock_history_grant_ended ON dblock_permits`,
	},
	Enabled: `SELECT count(*) FROM pg_trigger WHERE tgname = 'dblock_history_ended' AND tgrelid = 'dblock_locks'::regclass`,
	List: `SELECT name, owner, token, coalesce(mode, ''), coalesce(` + pgUs("acquired_at") + `, 0), ` + pgUs("ended_at") + `, ended_how, coalesce(metadata, '')
FROM dblock_history WHERE ended_at >= now() - $1::bigint * interval '1 microsecond'
ORDER BY ended_at DESC, id DESC LIMIT $2`,
	ListName: `SELECT name, owner, token, coalesce(mode, ''), coalesce(` + pgUs("acquired_at") + `, 0), ` + pgUs("ended_at") + `, ended_how, coalesce(metadata, '')
FROM dblock_history WHERE name = $1 AND ended_at >= now() - $2::bigint * interval '1 microsecond'
ORDER BY ended_at DESC, id DESC LIMIT $3`,
	Prune: `DELETE FROM dblock_history WHERE id IN (
    SELECT id FROM dblock_history WHERE ended_at < now() - $1::bigint * interval '1 microsecond'
    ORDER BY ended_at LIMIT $2 FOR UPDATE SKIP LOCKED
)`,
	Record: `INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how)
VALUES ($1, $2, $3, $4, ` + pgAt(5) + `, clock_timestamp(), $6)`,
}

// pgAt is the timestamptz of bind parameter n, µs since the epoch (NULL
// stays NULL).
func pgAt(n int) string {
	return fmt.Sprintf("('epoch'::timestamptz + $%d::bigint * interval '1 microsecond')", n)
}

// pgShared: the row lock waits lockWaitMs at most (lock_timeout, local to
// the transaction, set in the statement's FROM item before the row is
// locked); clock_timestamp() because now() is the transaction's start.
// Readers lock the row FOR NO KEY UPDATE, never FOR UPDATE: the same
// conflicts, but a pessimistic shared hold's FOR KEY SHARE lets them be.
var pgShared = SharedSQL{
	LockRow: `SELECT coalesce(l.owner, ''), l.owner IS NULL, l.version, coalesce(l.mode, ''), coalesce(` + pgUs("l.expires_at") + `, 0),
       ` + pgUs("clock_timestamp()") + `, coalesce(` + pgUs("l.shared_until") + `, 0), coalesce(` + pgUs("l.wanted_until") + `, 0), l.reentry,
       ` + pgNextCols + `, coalesce(l.reader, '')
FROM dblock_locks l, (SELECT set_config('lock_timeout', '` + lockWaitMs + `', true)) AS cfg
WHERE l.name = $1
FOR NO KEY UPDATE OF l`,
	ReadShare: `SELECT token, reentry, ` + pgUs("expires_at") + ` FROM dblock_shares WHERE name = $1 AND owner = $2 FOR UPDATE`,
	Begin: `UPDATE dblock_locks SET owner = '', reentry = 1, version = nextval('dblock_token_seq'), mode = '` + readMode + `',
    acquired_at = ` + pgAt(1) + `, expires_at = ` + pgAt(2) + `, shared_until = NULL, metadata = NULL, reader = NULL,
    updated_at = clock_timestamp(), next_owner = NULL, next_since = NULL, next_until = NULL
WHERE name = $3
RETURNING version`,
	Update: `UPDATE dblock_locks SET owner = $1, reentry = $2, expires_at = ` + pgAt(3) + `, shared_until = ` + pgAt(4) + `, updated_at = clock_timestamp()
WHERE name = $5`,
	PutShare: `INSERT INTO dblock_shares (name, owner, token, reentry, acquired_at, expires_at, metadata)
VALUES ($1, $2, $3, $4, ` + pgAt(5) + `, ` + pgAt(6) + `, $7)
ON CONFLICT (name, owner) DO UPDATE SET
    token = excluded.token, reentry = excluded.reentry, acquired_at = excluded.acquired_at,
    expires_at = excluded.expires_at, metadata = excluded.metadata`,
	SetShare:  `UPDATE dblock_shares SET reentry = $1, expires_at = ` + pgAt(2) + ` WHERE name = $3 AND owner = $4`,
	DropShare: `DELETE FROM dblock_shares WHERE name = $1 AND owner = $2`,
	Want: `UPDATE dblock_locks SET wanted_until = greatest(coalesce(wanted_until, now()), now() + $1::bigint * interval '1 microsecond')
WHERE name = $2 AND owner = ''`,
	Unwant: `UPDATE dblock_locks SET wanted_until = NULL WHERE name = $1 AND wanted_until IS NOT NULL`,
	Holder: `SELECT s.token, s.reentry, ` + pgUs("s.expires_at") + `, ` + pgUs("now()") + `, l.owner, l.owner IS NULL, l.version
FROM dblock_shares s LEFT JOIN dblock_locks l ON l.name = s.name
WHERE s.name = $1 AND s.owner = $2
UNION ALL
SELECT version, reentry, ` + pgUs("expires_at") + `, ` + pgUs("now()") + `, owner, false, version
FROM dblock_locks WHERE name = $3 AND owner = '' AND reader = $4
ORDER BY 1 DESC LIMIT 1`,
	Notify: `SELECT pg_notify('` + NotifyChannel + `', $1)::text`,
	List: `SELECT name, owner, token, reentry, ` + pgUs("acquired_at") + `, ` + pgUs("expires_at") + ` FROM (
    SELECT name, owner, token, reentry, acquired_at, expires_at FROM dblock_shares WHERE expires_at > now()
    UNION ALL
    SELECT name, reader, version, reentry, acquired_at, expires_at FROM dblock_locks
    WHERE owner = '' AND reader IS NOT NULL AND expires_at > now()
) AS readers WHERE true ORDER BY name, owner`,
	Acquire: pgShareAcquire, Release: pgShareRelease, Renew: pgShareRenew,
}

// pgSemaphore: a grant is one call of dblock_grant_permits (migration
// 00020), which waits for the semaphore's row (others hold it for one
// grant); the release commits asynchronously, as a lease's does.
var pgSemaphore = SemaphoreSQL{
	Acquire: `SELECT granted, token, lim, used, next_us, now_us FROM dblock_grant_permits($1, $2, $3, $4, $5, $6, $7)`,
	Granted: `SELECT id, ` + pgUs("expires_at") + `, ` + pgUs("now()") + ` FROM dblock_permits WHERE name = $1 AND request = $2`,
	Renew: `UPDATE dblock_permits SET expires_at = greatest(expires_at, now() + $1::bigint * interval '1 microsecond')
WHERE id = $2 AND owner = $3 AND expires_at > now()`,
	Release: `DELETE FROM dblock_permits p
USING (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
WHERE p.id = $1 AND p.owner = $2 AND p.expires_at > now()
RETURNING pg_notify('` + NotifyChannel + `', p.name)::text IS NOT NULL`,
	Holder: `SELECT owner, ` + pgUs("expires_at") + `, ` + pgUs("now()") + ` FROM dblock_permits WHERE id = $1`,
	SetLimit: `INSERT INTO dblock_semaphores (name, lim, updated_at) VALUES ($1, $2, now())
ON CONFLICT (name) DO UPDATE SET lim = excluded.lim, updated_at = excluded.updated_at
RETURNING pg_notify('` + NotifyChannel + `', name)::text IS NOT NULL`,
	Read: `SELECT s.lim, (SELECT coalesce(sum(p.permits), 0) FROM dblock_permits p WHERE p.name = s.name AND p.expires_at > now())
FROM dblock_semaphores s WHERE s.name = $1`,
	List: `SELECT id, name, owner, permits, ` + pgUs("acquired_at") + `, ` + pgUs("expires_at") + `
FROM dblock_permits WHERE expires_at > now() ORDER BY name, id`,
}

var pgSharedReap = SharedReapSQL{
	DeleteShares: `DELETE FROM dblock_shares WHERE (name, owner) IN (
    SELECT s.name, s.owner FROM dblock_shares s
    WHERE s.expires_at < now() - $1::bigint * interval '1 microsecond'
      AND NOT EXISTS (SELECT 1 FROM dblock_locks l
                      WHERE l.name = s.name AND l.version = s.token AND l.owner IN ('', s.owner) AND l.expires_at > now())
    ORDER BY s.expires_at LIMIT $2 FOR UPDATE OF s SKIP LOCKED
)`,
	DeleteGrants: `DELETE FROM dblock_permits WHERE id IN (
    SELECT id FROM dblock_permits WHERE expires_at < now() - $1::bigint * interval '1 microsecond'
    ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
)`,
	DeleteSemaphores: `DELETE FROM dblock_semaphores WHERE name IN (
    SELECT s.name FROM dblock_semaphores s
    WHERE s.updated_at < now() - $1::bigint * interval '1 microsecond'
      AND NOT EXISTS (SELECT 1 FROM dblock_permits p WHERE p.name = s.name)
    LIMIT $2 FOR UPDATE SKIP LOCKED
) AND NOT EXISTS (SELECT 1 FROM dblock_permits p WHERE p.name = dblock_semaphores.name)`,
}

// pgShareAcquire and pgShareRelease call the functions of the migration
// that created dblock_shares (migrations/postgres/00005): a function's
// statements each see what committed before they began, which the release's
// count of the readers left needs, in one round trip.
const (
	pgShareAcquire = `SELECT acquired, token, holder, holder_mode, expires_us, now_us, writer_waits, granted_us
FROM dblock_acquire_share($1, $2, $3, $4, true)`
	pgShareRelease = `SELECT dblock_release_share($1, $2, $3)`
)

// pgShareRenew is RenewShare in one statement ($1 name, $2 owner, $3 token,
// $4 ttl µs): the row locked first; a reader recorded in the row (reader,
// see SharedSQL) extends the row's expiry; otherwise the share is extended
// while it is unexpired and the row still holds its period, and the row's
// expiry (and an exclusive holder's shared_until) with it. It answers
// whether it did.
var pgShareRenew = `WITH cur AS (
    SELECT l.name, l.version, l.owner, l.reader, l.expires_at FROM dblock_locks l,
        (SELECT set_config('lock_timeout', '` + lockWaitMs + `', true)) AS cfg
    WHERE l.name = $1
    FOR NO KEY UPDATE OF l
), solo AS (
    UPDATE dblock_locks l SET
        expires_at = greatest(l.expires_at, clock_timestamp() + $4::bigint * interval '1 microsecond'),
        updated_at = clock_timestamp()
    FROM cur
    WHERE l.name = $1 AND cur.owner = '' AND cur.reader = $2 AND cur.version = $3 AND cur.expires_at > clock_timestamp()
    RETURNING 1
), s AS (
    UPDATE dblock_shares d SET expires_at = greatest(d.expires_at, clock_timestamp() + $4::bigint * interval '1 microsecond')
    FROM cur
    WHERE d.name = $1 AND d.owner = $2 AND d.token = $3 AND d.reentry > 0 AND d.expires_at > clock_timestamp()
      AND cur.version = $3 AND cur.owner IN ('', $2) AND cur.reader IS DISTINCT FROM $2 AND cur.expires_at > clock_timestamp()
    RETURNING d.expires_at
), upd AS (
    UPDATE dblock_locks l SET
        expires_at   = greatest(l.expires_at, s.expires_at),
        shared_until = CASE WHEN l.owner = $2 THEN greatest(coalesce(l.shared_until, s.expires_at), s.expires_at) ELSE l.shared_until END,
        updated_at   = clock_timestamp()
    FROM s WHERE l.name = $1
    RETURNING 1
)
SELECT (SELECT count(*) FROM solo) + (SELECT count(*) FROM s) > 0`

var pgSlots = SlotSQL{
	Claim: `INSERT INTO dblock_slots (job, last_slot, updated_at) VALUES ($1, ` + pgAt(2) + `, now())
ON CONFLICT (job) DO UPDATE SET last_slot = excluded.last_slot, updated_at = excluded.updated_at
WHERE dblock_slots.last_slot < excluded.last_slot`,
	Last: `SELECT ` + pgUs("last_slot") + ` FROM dblock_slots WHERE job = $1`,
	Keep: `UPDATE dblock_locks SET expires_at = acquired_at + $1::bigint * interval '1 microsecond', updated_at = now()
WHERE name = $2 AND owner = $3 AND version = $4 AND reentry = 1 AND expires_at > now()
  AND acquired_at + $5::bigint * interval '1 microsecond' > now()`,
}

// pgNoneAhead holds when no live waiter an exclusive acquisition queues
// behind (any kind but a semaphore's) is ahead of me, the waiter's row of
// name $1, in the queue: the nearest one, looked up with LIMIT 1 in the
// queue index's order backwards from me's position, is none. The ordered
// scan is an index scan whatever the statistics (a bitmap scan returns no
// order), and an index scan marks the entries of deleted waiters dead as
// it passes them, so a name's checks do not revisit every waiter it had
// since the last vacuum (migration 00016); unlike dblock_queue_ahead's
// count it needs no function call, which costs PostgreSQL 15 tens of
// microseconds for its SET clause. The hand-offs and takes need only
// whether the count is zero.
const pgNoneAhead = `(SELECT w.id FROM dblock_waiters w
        WHERE w.name = $1 AND (w.created_at, w.id) < (me.created_at, me.id)
          AND w.expires_at > now() AND w.kind <> 'semaphore'
        ORDER BY w.created_at DESC, w.id DESC LIMIT 1) IS NULL`
