// MySQL 8's and MariaDB's statements, written out (positional ? for every
// argument): where the two differ, each has its own, named for it. Times
// are read as µs since the epoch (myUs). The code that binds and reads
// them is MySQL's engine (mysql_<concern>.go, or the concern's file where
// every database runs a statement alike). testdata/sql/mysql.sql and
// mariadb.sql hold them as the server sees them.

package store

import (
	"fmt"
	"strings"
)

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

// mariadbReturning makes an acquire statement return the row as it left it
// (LeaseSQL.AcquireReturning): the owner (ours when acquired), the token,
// the reentry count, the mode, the expiry and the database clock. A skipped
// floor returns no row.
var mariadbReturning = `
RETURNING IFNULL(owner, ''), version, reentry, IFNULL(mode, ''), IFNULL(` + myUs("expires_at") + `, 0), ` + myUs("UTC_TIMESTAMP(6)") + `,
    ` + mysqlNextCols

// mysqlOwnedToken: see LeaseSQL.OwnedToken.
const mysqlOwnedToken = "SELECT version, reentry FROM dblock_locks WHERE name = ? AND owner = ?"

// mysqlAcquireUpdate is the takeover or re-entry of an existing row, shared
// by mysqlAcquire, mariadbAcquire and mysqlAcquireValues. A free or expired
// row is taken unless a live reservation keeps it for another owner (see
// reserve.go; mysqlReserved, which reads the columns assigned before it the
// same whether evaluated before or after them: a row it keeps is left as it
// was). MySQL assigns from left to right, each expression reading the
// columns already assigned: owner is assigned after the columns that test
// the row's old owner, expires_at and updated_at after owner, and the
// reservation last, cleared when the statement left the row the owner's
// with a live lease and the reservation was the owner's or lapsed.
const mysqlAcquireUpdate = `ON DUPLICATE KEY UPDATE
    reentry     = IF(owner = VALUES(owner) AND expires_at > UTC_TIMESTAMP(6), reentry + 1,
                     IF((owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)) AND NOT ` + mysqlReserved + `, 1, reentry)),
    version     = LAST_INSERT_ID(IF((owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)) AND NOT ` + mysqlReserved + `, GREATEST(version + 1, VALUES(version)), version)),
    mode        = IF((owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)) AND NOT ` + mysqlReserved + `, VALUES(mode), mode),
    acquired_at = IF((owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)) AND NOT ` + mysqlReserved + `, VALUES(acquired_at), acquired_at),
    metadata    = IF((owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)) AND NOT ` + mysqlReserved + `, VALUES(metadata), metadata),
    owner       = IF((owner IS NULL OR owner = VALUES(owner) OR expires_at <= UTC_TIMESTAMP(6)) AND NOT ` + mysqlReserved + `, VALUES(owner), owner),
    expires_at  = IF(owner = VALUES(owner) AND NOT ` + mysqlReserved + `, GREATEST(IFNULL(expires_at, VALUES(expires_at)), VALUES(expires_at)), expires_at),
    updated_at  = IF(owner = VALUES(owner) AND NOT ` + mysqlReserved + `, VALUES(updated_at), updated_at),
    next_since  = IF(owner = VALUES(owner) AND expires_at > UTC_TIMESTAMP(6) AND (next_owner = VALUES(owner) OR next_until <= UTC_TIMESTAMP(6)), NULL, next_since),
    next_until  = IF(owner = VALUES(owner) AND expires_at > UTC_TIMESTAMP(6) AND (next_owner = VALUES(owner) OR next_until <= UTC_TIMESTAMP(6)), NULL, next_until),
    next_owner  = IF(next_until IS NULL, NULL, next_owner)`

// mysqlReserved: a live reservation keeps the row for another owner than
// the acquirer's, and the acquirer does not hold it (a holder's re-entry is
// never kept out).
// (IFNULL: a comparison with a NULL column is NULL, which NOT keeps NULL.)
const mysqlReserved = `IFNULL(next_until > UTC_TIMESTAMP(6) AND NOT (next_owner <=> VALUES(owner)) AND NOT (owner <=> VALUES(owner) AND expires_at > UTC_TIMESTAMP(6)), FALSE)`

// mysqlEnsure is the pessimistic mode's insert of a free row (RowSQL.Ensure
// on MySQL), reading the floor as mysqlAcquire does; a duplicate is left
// unchanged but evaluates LAST_INSERT_ID(version), so that insert id 0 means
// the fence row was skipped.
const mysqlEnsure = `INSERT INTO dblock_locks (name, reentry, version, updated_at)
SELECT ?, 0, LAST_INSERT_ID(f.floor + 1), UTC_TIMESTAMP(6)
FROM dblock_fence f WHERE f.id = 1 FOR SHARE SKIP LOCKED
ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version)`

// mariadbEnsure is mysqlEnsure in MariaDB's words, returning a row unless
// the floor's row was skipped (see mariadbAcquire).
const mariadbEnsure = `INSERT INTO dblock_locks (name, reentry, version, updated_at)
SELECT ?, 0, LAST_INSERT_ID(f.floor + 1), UTC_TIMESTAMP(6)
FROM dblock_fence f WHERE f.id = 1 LOCK IN SHARE MODE SKIP LOCKED
ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version)
RETURNING version`

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

// owner is assigned before reentry, so it still sees the old count, and
// every column that tests shared_until before it. A holder that took the
// read lock too hands the name to readers on its last release (see the
// PostgreSQL statement).
const mysqlRelease = `UPDATE dblock_locks SET
    owner        = IF(reentry > 1, owner, IF(shared_until > UTC_TIMESTAMP(6), '', NULL)),
    expires_at   = IF(reentry > 1, expires_at, IF(shared_until > UTC_TIMESTAMP(6), shared_until, NULL)),
    mode         = IF(reentry <= 1 AND shared_until > UTC_TIMESTAMP(6), '` + readMode + `', mode),
    updated_at   = UTC_TIMESTAMP(6),
    shared_until = IF(reentry > 1, shared_until, NULL),
    reader       = NULL,
    reentry      = IF(reentry > 1, reentry - 1, IF(owner = '', 1, 0))
WHERE name = ? AND owner = ? AND version = ?`

const mysqlRenew = `UPDATE dblock_locks SET
    expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND),
    updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)`

const mysqlProclaim = `UPDATE dblock_locks SET metadata = ?, updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)`

var mysqlHolder = `SELECT IFNULL(owner, ''), version, IFNULL(mode, ''), IFNULL(` + myUs("expires_at") + `, 0), ` + myUs("UTC_TIMESTAMP(6)") + `, reentry,
    ` + mysqlNextCols + `
FROM dblock_locks WHERE name = ?`

// mysqlNextCols is the reservation as Holder reads it (see reserve.go).
var mysqlNextCols = `IFNULL(next_owner, ''), IFNULL(` + myUs("next_since") + `, 0), IFNULL(` + myUs("next_until") + `, 0)`

// mysql8NoLongWait makes an UPDATE wait at most a second for a row lock
// (a pessimistic holder may keep the row locked for long) on MySQL 8, which
// has no SET STATEMENT: an optimizer hint. (MariaDB's statements take
// mariadbNoWait instead. No MySQL 8 server runs in this project's CI.)
func mysql8NoLongWait(update string) string {
	return strings.Replace(update, "UPDATE ", "UPDATE /*+ SET_VAR(innodb_lock_wait_timeout=1) */ ", 1)
}

// mysqlReserve and mysqlUnreserve: see LeaseSQL.Reserve. Bound (owner,
// since µs, d µs, name, owner, since µs), and (name, owner).
const (
	mysqlReserve = `UPDATE dblock_locks SET
    next_owner = ?,
    next_since = TIMESTAMP'1970-01-01 00:00:00' + INTERVAL ? MICROSECOND,
    next_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND (next_until IS NULL OR next_until <= UTC_TIMESTAMP(6) OR next_owner = ?
    OR next_since > TIMESTAMP'1970-01-01 00:00:00' + INTERVAL ? MICROSECOND)`
	mysqlUnreserve = `UPDATE dblock_locks SET next_owner = NULL, next_since = NULL, next_until = NULL
WHERE name = ? AND next_owner = ?`
)

// mysqlGuard cannot bound the caller's transaction as the PostgreSQL Guard
// does: MariaDB's idle_transaction_timeout is session-scoped (SET STATEMENT
// covers one statement, not the idle time after it) and MySQL has none. See
// optimistic.Locker.Guard for what users set instead.
const mysqlGuard = `SELECT 1 FROM dblock_locks
WHERE name = ? AND owner = ? AND version = ? AND expires_at > UTC_TIMESTAMP(6)
LOCK IN SHARE MODE`

// mysqlLockName locks a name's row for a lease's CAS update that follows in
// the same transaction (see lockedCAS).
const mysqlLockName = `SELECT 1 FROM dblock_locks WHERE name = ? FOR UPDATE`

// mysqlForceRelease: mode NULL marks the row freed by an administrator (the
// history's trigger reads it); a release keeps the mode.
const mysqlForceRelease = `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, mode = NULL, shared_until = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner IS NOT NULL`

// mariadbNoWait makes one statement fail at once (1205) instead of waiting
// for a row lock; mariadbShortWait makes it wait a second at most (a
// waiter giving up its reservation: a reservation is tried again at the
// next look, a give-up is not).
const (
	mariadbNoWait    = "SET STATEMENT innodb_lock_wait_timeout=0 FOR "
	mariadbShortWait = "SET STATEMENT innodb_lock_wait_timeout=1 FOR "
)

var mysqlLease = LeaseSQL{
	Acquire: mysqlAcquire, Release: mysqlRelease, Renew: mysqlRenew, Proclaim: mysqlProclaim,
	FloorInTx: mysqlFloorText + mysqlShareSkipLocked, AcquireInTx: mysqlAcquireValues,
	Holder: mysqlHolder, Guard: mysqlGuard, GuardTwice: true, ForceRelease: mysqlForceRelease, OwnedToken: mysqlOwnedToken,
	Exists:  "SELECT 1 FROM dblock_locks WHERE name = ?",
	Reserve: mysql8NoLongWait(mysqlReserve), Unreserve: mysql8NoLongWait(mysqlUnreserve),
}

// mariadbTakeFree takes a name's existing row when no live lease holds it
// and no other owner's live reservation keeps it (see LeaseSQL.TakeFree):
// the fresh-take branch of mariadbAcquire's update, as a plain update. The
// assignments run in order, each on the values the earlier ones left, as
// the upsert's do; owner comes last. Arguments: mode, metadata, TTL (µs),
// owner three times, name, owner.
const mariadbTakeFree = `UPDATE dblock_locks SET
    reentry     = 1,
    version     = LAST_INSERT_ID(version + 1),
    mode        = ?,
    acquired_at = UTC_TIMESTAMP(6),
    metadata    = ?,
    expires_at  = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
    next_since  = IF(next_owner = ? OR next_until <= UTC_TIMESTAMP(6), NULL, next_since),
    next_until  = IF(next_owner = ? OR next_until <= UTC_TIMESTAMP(6), NULL, next_until),
    next_owner  = IF(next_until IS NULL, NULL, next_owner),
    updated_at  = UTC_TIMESTAMP(6),
    owner       = ?
WHERE name = ? AND (owner IS NULL OR expires_at <= UTC_TIMESTAMP(6))
  AND (next_until IS NULL OR next_until <= UTC_TIMESTAMP(6) OR next_owner <=> ?)`

// Only the acquire refuses to wait: release and renew are CAS statements on a
// row held by us, which other statements lock for one autocommit statement at
// most, and failing them at once would leave the lease to expire.
var mariadbLease = LeaseSQL{
	Acquire: mariadbNoWait + mariadbAcquire, Release: mysqlRelease, Renew: mysqlRenew, Proclaim: mysqlProclaim,
	TakeFree:  mariadbNoWait + mariadbTakeFree,
	FloorInTx: mysqlFloorText + mariadbShareSkipLocked, AcquireInTx: mariadbNoWait + mysqlAcquireValues,
	AcquireReturning:     mariadbNoWait + mariadbAcquire + mariadbReturning,
	AcquireInTxReturning: mariadbNoWait + mysqlAcquireValues + mariadbReturning,
	Holder:               mysqlHolder, Guard: mysqlGuard, GuardTwice: true, ForceRelease: mysqlForceRelease, OwnedToken: mysqlOwnedToken,
	Exists:  "SELECT 1 FROM dblock_locks WHERE name = ?",
	Reserve: mariadbNoWait + mysqlReserve, Unreserve: mariadbShortWait + mysqlUnreserve,
}

// myLockCols: the row's lease columns, the database clock, what identifies
// the locking session (see SessionRef): its connection id and the server's
// @@server_id, and the session's current hold bound (bound: MySQL 8's
// wait_timeout, MariaDB's idle_transaction_timeout; see SetHoldBound), so
// that a session that has it already needs no statement to set it.
func myLockCols(bound string) string {
	return `IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(` + myUs("expires_at") + `, 0), ` +
		myUs("UTC_TIMESTAMP(6)") + `, CONNECTION_ID(), @@server_id, ` + bound
}

// myRow is the RowSQL of MySQL 8 (bound @@SESSION.wait_timeout, mysqlEnsure,
// share "FOR SHARE") or MariaDB ("LOCK IN SHARE MODE").
func myRow(bound, ensure, share string) RowSQL {
	cols := myLockCols(bound)
	lock := `SELECT ` + cols + ` FROM dblock_locks WHERE name = ? FOR UPDATE`
	lockShared := `SELECT ` + cols + ` FROM dblock_locks WHERE name = ? ` + share
	return RowSQL{
		Lock:             lock,
		LockNoWait:       lock + " NOWAIT",
		LockShared:       lockShared,
		LockSharedNoWait: lockShared + " NOWAIT",
		Ensure:           ensure,
		LockMany:         `SELECT name, ` + cols + ` FROM dblock_locks WHERE name IN (%s) ORDER BY name FOR UPDATE%s`,
		LockManyNoWait:   `SELECT name, ` + cols + ` FROM dblock_locks WHERE name IN (%s) ORDER BY name FOR UPDATE%s`,
		Alive:            `SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN (%s)`,
	}
}

var mysqlRow = myRow("@@SESSION.wait_timeout", mysqlEnsure, "FOR SHARE")

// MariaDB's insert of a free row does not wait for a holder's row lock.
var mariadbRow = myRow("@@SESSION.idle_transaction_timeout", mariadbNoWait+mariadbEnsure, "LOCK IN SHARE MODE")

var mysqlQueue = QueueSQL{
	Enqueue: `INSERT INTO dblock_waiters (name, owner, kind, created_at, heartbeat_at, expires_at)
VALUES (?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`,

	Heartbeat: `UPDATE dblock_waiters SET heartbeat_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE id = ? AND expires_at > UTC_TIMESTAMP(6)`,

	HeartbeatMany: `UPDATE dblock_waiters SET heartbeat_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE expires_at > UTC_TIMESTAMP(6) AND id IN (%s)`,

	Check: `SELECT
    CASE WHEN me.id IS NULL THEN 0 ELSE 1 END,
    CASE WHEN me.id IS NULL THEN 0 ELSE (
        SELECT COUNT(*) FROM dblock_waiters w
        WHERE w.name = ? AND w.expires_at > UTC_TIMESTAMP(6) AND w.kind <> 'semaphore'
          AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
    ) END,
    CASE WHEN me.id IS NULL THEN 0 ELSE COALESCE((
        SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', w.expires_at) FROM dblock_waiters w
        WHERE w.name = ? AND w.expires_at > UTC_TIMESTAMP(6) AND w.kind <> 'semaphore'
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
    (SELECT COUNT(*) FROM dblock_waiters w WHERE w.name = ? AND w.expires_at > UTC_TIMESTAMP(6) AND w.kind <> 'semaphore'),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at), 0), TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_locks l ON l.name = ?`,

	Take: `DELETE FROM dblock_waiters WHERE id = ? AND expires_at > UTC_TIMESTAMP(6)`,

	Leave: `DELETE FROM dblock_waiters WHERE id = ?`,

	Jumped: mysqlJumped,

	GatePeek: mysqlGatePeek, GateCheck: mysqlGateCheck,
}

var mysqlGatePeek, mysqlGateCheck = gateSQL("UTC_TIMESTAMP(6)", mysqlDialect{}.Placeholder)

// mariadbQueue is mysqlQueue with a waiter's insert and first check, and
// its take of the head, in one CALL each (the procedures of MySQL
// migration 00021), the direct acquire in one (migration 00027), and the
// release that hands a name to a waiter in one (migration 00028).
var mariadbQueue = func() QueueSQL {
	q := mysqlQueue
	q.EnqueueCheck = `CALL dblock_enqueue_check(?, ?, ?, ?)`
	q.TakeHead = `CALL dblock_take_head(?, ?, ?, ?, ?, ?)`
	q.Direct = `CALL dblock_acquire_direct(?, ?, ?, ?, ?)`
	q.HandOver = `CALL dblock_hand_over(?, ?, ?, ?, ?, ?, ?, ?)`
	return q
}()

const mysqlJumped = `SELECT l.reentry, (
    SELECT COUNT(*) FROM dblock_waiters w
    WHERE w.name = l.name AND w.expires_at > UTC_TIMESTAMP(6) AND w.kind <> 'semaphore' AND w.created_at <= l.acquired_at
)
FROM dblock_locks l WHERE l.name = ? AND l.owner = ? AND l.version = ?`

const (
	myExpired = "owner IS NOT NULL AND expires_at <= UTC_TIMESTAMP(6)"
	myWaiterD = "expires_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
	myIdle    = "owner IS NULL AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
)

var mysqlReap = ReapSQL{
	ExpiredCandidates: `SELECT name FROM dblock_locks WHERE ` + myExpired + ` ORDER BY expires_at LIMIT ?`,
	LockExpired:       `SELECT name FROM dblock_locks WHERE name IN (%s) AND ` + myExpired + ` FOR UPDATE SKIP LOCKED`,
	FreeLocked: `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE name IN (%s) AND ` + myExpired,

	WaiterCandidates:    `SELECT id FROM dblock_waiters WHERE ` + myWaiterD + ` ORDER BY expires_at LIMIT ?`,
	LockWaiters:         `SELECT id FROM dblock_waiters WHERE id IN (%s) AND ` + myWaiterD + ` FOR UPDATE SKIP LOCKED`,
	DeleteLockedWaiters: `DELETE FROM dblock_waiters WHERE id IN (%s) AND ` + myWaiterD,

	IdleCandidates:   `SELECT name, version FROM dblock_locks WHERE ` + myIdle + ` LIMIT ?`,
	LockIdle:         `SELECT name FROM dblock_locks WHERE name IN (%s) AND ` + myIdle + ` AND version <= ? FOR UPDATE SKIP LOCKED`,
	FenceFloor:       `SELECT floor FROM dblock_fence WHERE id = 1`,
	LockFloor:        `SELECT floor FROM dblock_fence WHERE id = 1 FOR UPDATE NOWAIT`,
	RaiseFloor:       `UPDATE dblock_fence SET floor = GREATEST(floor, ?) WHERE id = 1`,
	DeleteLockedIdle: `DELETE FROM dblock_locks WHERE name IN (%s) AND ` + myIdle + ` AND version <= ?`,

	Gauges: `SELECT
    (SELECT count(*) FROM dblock_locks WHERE owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)),
    (SELECT count(*) FROM dblock_waiters WHERE expires_at > UTC_TIMESTAMP(6)),
    (SELECT count(*) FROM dblock_waiters WHERE expires_at <= UTC_TIMESTAMP(6)),
    IFNULL((SELECT ` + myUs("UTC_TIMESTAMP(6)") + ` - ` + myUs("min(expires_at)") + `
            FROM dblock_locks WHERE ` + myExpired + `), 0)`,
}

// mariadbReap is mysqlReap but for the floor: MariaDB raises it in one
// statement that fails at once, rather than wait, when acquisitions hold the
// fence row (MySQL 8 has no per-statement lock wait bound: it locks the row
// with NOWAIT first, LockFloor). No other statement of a pass waits for a
// row lock: candidates are read without locking and locked with SKIP LOCKED.
var mariadbReap = ReapSQL{
	ExpiredCandidates: `SELECT name FROM dblock_locks WHERE owner IS NOT NULL AND expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?`,
	LockExpired:       `SELECT name FROM dblock_locks WHERE name IN (%s) AND owner IS NOT NULL AND expires_at <= UTC_TIMESTAMP(6) FOR UPDATE SKIP LOCKED`,
	FreeLocked: `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE name IN (%s) AND owner IS NOT NULL AND expires_at <= UTC_TIMESTAMP(6)`,
	WaiterCandidates:    `SELECT id FROM dblock_waiters WHERE expires_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY expires_at LIMIT ?`,
	LockWaiters:         `SELECT id FROM dblock_waiters WHERE id IN (%s) AND expires_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND FOR UPDATE SKIP LOCKED`,
	DeleteLockedWaiters: `DELETE FROM dblock_waiters WHERE id IN (%s) AND expires_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`,
	IdleCandidates:      `SELECT name, version FROM dblock_locks WHERE owner IS NULL AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT ?`,
	LockIdle:            `SELECT name FROM dblock_locks WHERE name IN (%s) AND owner IS NULL AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND version <= ? FOR UPDATE SKIP LOCKED`,
	FenceFloor:          `SELECT floor FROM dblock_fence WHERE id = 1`,
	RaiseFloor:          `SET STATEMENT innodb_lock_wait_timeout=0 FOR UPDATE dblock_fence SET floor = GREATEST(floor, ?) WHERE id = 1`,
	DeleteLockedIdle:    `DELETE FROM dblock_locks WHERE name IN (%s) AND owner IS NULL AND updated_at <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AND version <= ?`,
	Gauges: `SELECT
    (SELECT count(*) FROM dblock_locks WHERE owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)),
    (SELECT count(*) FROM dblock_waiters WHERE expires_at > UTC_TIMESTAMP(6)),
    (SELECT count(*) FROM dblock_waiters WHERE expires_at <= UTC_TIMESTAMP(6)),
    IFNULL((SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) - TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', min(expires_at))
            FROM dblock_locks WHERE owner IS NOT NULL AND expires_at <= UTC_TIMESTAMP(6)), 0)`,
}

// mysqlHistory is empty: MySQL and MariaDB report no insert id for a
// statement that fired a trigger (even one that writes nothing), and MySQL 8's
// acquisitions read their token from the insert id, so dblock_locks can carry
// no trigger there. MariaDB's read theirs from a RETURNING row instead.
var mysqlHistory = HistorySQL{}

// mariadbGrantEntry is the history's insert of a share (mode read) or a
// semaphore grant that ended, its token the column tokenCol.
func mariadbGrantEntry(tokenCol, mode string) string {
	return `INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
    VALUES (OLD.name, OLD.owner, ` + tokenCol + `, '` + mode + `', OLD.acquired_at, UTC_TIMESTAMP(6),
        IF(OLD.expires_at <= UTC_TIMESTAMP(6), 'expired', 'released'), OLD.metadata)`
}

// mariadbHistory: see pgHistory. MariaDB has no WHEN clause: the body's IF
// tests the same. UTC_TIMESTAMP(6) is the statement's start, not the
// transaction's.
var mariadbHistory = HistorySQL{
	Enable: []string{
		`DROP TRIGGER IF EXISTS dblock_history_ended`,
		`CREATE TRIGGER dblock_history_ended AFTER UPDATE ON dblock_locks FOR EACH ROW
IF OLD.owner IS NOT NULL AND (OLD.owner <> '' OR OLD.reader IS NOT NULL) AND (NOT (NEW.owner <=> OLD.owner) OR NEW.version <> OLD.version) THEN
    INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
    VALUES (OLD.name, IF(OLD.owner = '', OLD.reader, OLD.owner), OLD.version, OLD.mode, OLD.acquired_at, UTC_TIMESTAMP(6),
        CASE WHEN NEW.owner = '' AND NEW.version = OLD.version THEN 'released'
             WHEN NEW.owner IS NOT NULL AND NEW.owner <> OLD.owner THEN 'taken_over'
             WHEN NEW.owner IS NULL AND NEW.mode IS NULL THEN 'force_released'
             WHEN OLD.expires_at <= UTC_TIMESTAMP(6) THEN 'expired'
             ELSE 'released' END,
        OLD.metadata);
END IF`,
		`DROP TRIGGER IF EXISTS dblock_history_share_ended`,
		`CREATE TRIGGER dblock_history_share_ended AFTER DELETE ON dblock_shares FOR EACH ROW
` + mariadbGrantEntry("OLD.token", readMode),
		`DROP TRIGGER IF EXISTS dblock_history_share_replaced`,
		`CREATE TRIGGER dblock_history_share_replaced AFTER UPDATE ON dblock_shares FOR EACH ROW
IF NEW.token <> OLD.token THEN
    ` + mariadbGrantEntry("OLD.token", readMode) + `;
END IF`,
		`DROP TRIGGER IF EXISTS dblock_history_grant_ended`,
		`CREATE TRIGGER dblock_history_grant_ended AFTER DELETE ON dblock_permits FOR EACH ROW
` + mariadbGrantEntry("OLD.id", "semaphore"),
	},
	Disable: []string{
		`DROP TRIGGER IF EXISTS dblock_history_ended`,
		`DROP TRIGGER IF EXISTS dblock_history_share_ended`,
		`DROP TRIGGER IF EXISTS dblock_history_share_replaced`,
		`DROP TRIGGER IF EXISTS dblock_history_grant_ended`,
	},
	Enabled: `SELECT count(*) FROM information_schema.triggers
WHERE trigger_schema = DATABASE() AND trigger_name = 'dblock_history_ended' AND event_object_table = 'dblock_locks'`,
	List: `SELECT name, owner, token, IFNULL(mode, ''), IFNULL(` + myUs("acquired_at") + `, 0), ` + myUs("ended_at") + `, ended_how, IFNULL(metadata, '')
FROM dblock_history WHERE ended_at >= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY ended_at DESC, id DESC LIMIT ?`,
	ListName: `SELECT name, owner, token, IFNULL(mode, ''), IFNULL(` + myUs("acquired_at") + `, 0), ` + myUs("ended_at") + `, ended_how, IFNULL(metadata, '')
FROM dblock_history WHERE name = ? AND ended_at >= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY ended_at DESC, id DESC LIMIT ?`,
	Prune: `DELETE FROM dblock_history WHERE ended_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY ended_at LIMIT ?`,
	Record: `INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how)
VALUES (?, ?, ?, ?, ` + myAt + `, UTC_TIMESTAMP(6), ?)`,
}

// myAt is the DATETIME(6) of a bind parameter, µs since the epoch (NULL
// stays NULL).
const myAt = "TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00')"

// mysqlSemaphore: Lock waits for the row (others hold it for one grant's
// few statements); Used runs after it, so its consistent read sees every
// grant committed before the lock was had. MariaDB's (mariadbSemaphore)
// runs that transaction on the server: one CALL of the procedure of MySQL
// migration 00014 (MySQL 8 has it too, but keeps the transaction driven
// from here: the test servers run MariaDB only).
var mysqlSemaphore = SemaphoreSQL{
	Ensure: `INSERT INTO dblock_semaphores (name, lim, updated_at) VALUES (?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE name = name`,
	Touch:  `UPDATE dblock_semaphores SET updated_at = UTC_TIMESTAMP(6) WHERE name = ?`,
	Lock:   `SELECT lim, ` + myUs("UTC_TIMESTAMP(6)") + ` FROM dblock_semaphores WHERE name = ? FOR UPDATE`,
	Used: `SELECT IFNULL(SUM(permits), 0), IFNULL(MIN(` + myUs("expires_at") + `), 0)
FROM dblock_permits WHERE name = ? AND expires_at > ` + myAt + ` LOCK IN SHARE MODE`,
	Grant: `INSERT INTO dblock_permits (name, owner, permits, acquired_at, expires_at, metadata, request)
VALUES (?, ?, ?, ` + myAt + `, ` + myAt + `, ?, ?)`,
	Granted: `SELECT id, ` + myUs("expires_at") + `, ` + myUs("UTC_TIMESTAMP(6)") + ` FROM dblock_permits WHERE name = ? AND request = ?`,
	Renew: `UPDATE dblock_permits SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE id = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`,
	Release: `DELETE FROM dblock_permits WHERE id = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`,
	Holder:  `SELECT owner, ` + myUs("expires_at") + `, ` + myUs("UTC_TIMESTAMP(6)") + ` FROM dblock_permits WHERE id = ?`,
	SetLimit: `INSERT INTO dblock_semaphores (name, lim, updated_at) VALUES (?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE lim = VALUES(lim), updated_at = VALUES(updated_at)`,
	Read: `SELECT s.lim, (SELECT IFNULL(SUM(p.permits), 0) FROM dblock_permits p WHERE p.name = s.name AND p.expires_at > UTC_TIMESTAMP(6))
FROM dblock_semaphores s WHERE s.name = ?`,
	List: `SELECT id, name, owner, permits, ` + myUs("acquired_at") + `, ` + myUs("expires_at") + `
FROM dblock_permits WHERE expires_at > UTC_TIMESTAMP(6) ORDER BY name, id`,
}

// mysqlSharedReap: single-table deletes in index order, which wait for a
// row another transaction holds (a grant or a share in its transaction,
// for a few statements) rather than skip it.
var mysqlSharedReap = SharedReapSQL{
	DeleteShares: `DELETE FROM dblock_shares
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND NOT EXISTS (SELECT 1 FROM dblock_locks l
                  WHERE l.name = dblock_shares.name AND l.version = dblock_shares.token
                    AND l.owner IN ('', dblock_shares.owner) AND l.expires_at > UTC_TIMESTAMP(6))
ORDER BY expires_at LIMIT ?`,
	DeleteGrants: `DELETE FROM dblock_permits WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY expires_at LIMIT ?`,
	DeleteSemaphores: `DELETE FROM dblock_semaphores
WHERE updated_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
  AND NOT EXISTS (SELECT 1 FROM dblock_permits p WHERE p.name = dblock_semaphores.name)
LIMIT ?`,
}

// mysqlSlots: an upsert that changes nothing reports no affected row (the
// driver does not ask for found rows).
var mysqlSlots = SlotSQL{
	Claim: `INSERT INTO dblock_slots (job, last_slot, updated_at) VALUES (?, ` + myAt + `, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    updated_at = IF(last_slot < VALUES(last_slot), VALUES(updated_at), updated_at),
    last_slot  = IF(last_slot < VALUES(last_slot), VALUES(last_slot), last_slot)`,
	Last: `SELECT ` + myUs("last_slot") + ` FROM dblock_slots WHERE job = ?`,
	Keep: `UPDATE dblock_locks SET expires_at = acquired_at + INTERVAL ? MICROSECOND, updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner = ? AND version = ? AND reentry = 1 AND expires_at > UTC_TIMESTAMP(6)
  AND acquired_at + INTERVAL ? MICROSECOND > UTC_TIMESTAMP(6)`,
}

var mariadbSemaphore = func() SemaphoreSQL {
	s := mysqlSemaphore
	s.Acquire = `CALL dblock_grant_permits(?, ?, ?, ?, ?, ?, ?)`
	return s
}()
