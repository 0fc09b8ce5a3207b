package store

// MySQL's and MariaDB's statements of the read locks (SharedSQL): the
// transaction's statements of MySQL 8, MariaDB's procedure calls, and
// MariaDB's plain statements tried before them (shared_take.go,
// shared_join.go).

// mysqlShareLock reads a name's row for SharedSQL.LockRow, followed by the
// lock clause.
var mysqlShareLock = `SELECT IFNULL(owner, ''), owner IS NULL, version, IFNULL(mode, ''), IFNULL(` + myUs("expires_at") + `, 0), ` + myUs("UTC_TIMESTAMP(6)") + `,
       IFNULL(` + myUs("shared_until") + `, 0), IFNULL(` + myUs("wanted_until") + `, 0), reentry,
       ` + mysqlNextCols + `, IFNULL(reader, '')
FROM dblock_locks WHERE name = ?`

// mysqlShared: on MySQL 8 the row lock does not wait (NOWAIT: its shortest
// lock wait is a second, set per session); a row locked elsewhere is
// retried for shareLockedMax. MariaDB's (mariadbShared) waits up to a
// second in the server's queue, which serves many readers of one name far
// better than retries. The reads of dblock_shares lock what they read, so they
// see the latest committed rows under REPEATABLE READ. The new token of a
// readers' period is the row's version + 1, reported as the insert id.
var mysqlShared = SharedSQL{
	LockRow: mysqlShareLock + `
FOR UPDATE NOWAIT`,
	ReadShare:  `SELECT token, reentry, ` + myUs("expires_at") + ` FROM dblock_shares WHERE name = ? AND owner = ? FOR UPDATE`,
	LiveShares: `SELECT count(*), IFNULL(MAX(` + myUs("expires_at") + `), 0) FROM dblock_shares WHERE name = ? AND token = ? AND expires_at > ` + myAt + ` LOCK IN SHARE MODE`,
	Begin: `UPDATE dblock_locks SET owner = '', reentry = 1, version = LAST_INSERT_ID(version + 1), mode = '` + readMode + `',
    acquired_at = ` + myAt + `, expires_at = ` + myAt + `, shared_until = NULL, metadata = NULL, reader = NULL,
    updated_at = UTC_TIMESTAMP(6), next_owner = NULL, next_since = NULL, next_until = NULL
WHERE name = ?`,
	Update: `UPDATE dblock_locks SET owner = ?, reentry = ?, expires_at = ` + myAt + `, shared_until = ` + myAt + `, updated_at = UTC_TIMESTAMP(6)
WHERE name = ?`,
	PutShare: `INSERT INTO dblock_shares (name, owner, token, reentry, acquired_at, expires_at, metadata)
VALUES (?, ?, ?, ?, ` + myAt + `, ` + myAt + `, ?)
ON DUPLICATE KEY UPDATE
    token = VALUES(token), reentry = VALUES(reentry), acquired_at = VALUES(acquired_at),
    expires_at = VALUES(expires_at), metadata = VALUES(metadata)`,
	SetShare:  `UPDATE dblock_shares SET reentry = ?, expires_at = ` + myAt + ` WHERE name = ? AND owner = ?`,
	DropShare: `DELETE FROM dblock_shares WHERE name = ? AND owner = ?`,
	Want: `UPDATE dblock_locks SET wanted_until = GREATEST(IFNULL(wanted_until, UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE name = ? AND owner = ''`,
	Unwant: `UPDATE dblock_locks SET wanted_until = NULL WHERE name = ? AND wanted_until IS NOT NULL`,
	Holder: `(SELECT s.token, s.reentry, ` + myUs("s.expires_at") + `, ` + myUs("UTC_TIMESTAMP(6)") + `, l.owner, l.owner IS NULL, l.version
FROM dblock_shares s LEFT JOIN dblock_locks l ON l.name = s.name
WHERE s.name = ? AND s.owner = ?)
UNION ALL
(SELECT version, reentry, ` + myUs("expires_at") + `, ` + myUs("UTC_TIMESTAMP(6)") + `, owner, 0, version
FROM dblock_locks WHERE name = ? AND owner = '' AND reader = ?)
ORDER BY 1 DESC LIMIT 1`,
	List: `SELECT name, owner, token, reentry, ` + myUs("acquired_at") + `, ` + myUs("expires_at") + ` FROM (
    SELECT name, owner, token, reentry, acquired_at, expires_at FROM dblock_shares WHERE expires_at > UTC_TIMESTAMP(6)
    UNION ALL
    SELECT name, reader, version, reentry, acquired_at, expires_at FROM dblock_locks
    WHERE owner = '' AND reader IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)
) AS readers WHERE TRUE ORDER BY name, owner`,
}

// mariadbShared is mysqlShared with a row lock that waits in the server's
// queue, a second at most (SET STATEMENT, this statement only): readers of
// one name hold it for a few statements each. A reader's acquisition and
// release are one CALL each of the procedures of MySQL migration 00014
// (replaced since; the acquisition's is dblock_acquire_read of 00025,
// which records a reader alone in the name's row, with
// dblock_acquire_share as its fallback), which run that transaction on the
// server (MySQL 8 has them too, but keeps the transaction driven from
// here: the test servers run MariaDB only), after a plain statement where
// one most likely does the whole job (TakeFree, ReleaseRecorded, Join,
// LeaveJoined: see shared_take.go). Renewals are the transaction of
// RenewShare, which renews a recorded reader in the row.
var mariadbShared = func() SharedSQL {
	s := mysqlShared
	s.LockRow = "SET STATEMENT innodb_lock_wait_timeout=1 FOR " + mysqlShareLock + `
FOR UPDATE`
	s.Acquire = `CALL dblock_acquire_read(?, ?, ?, ?)`
	s.AcquireFallback = `CALL dblock_acquire_share(?, ?, ?, ?)`
	s.Release = `CALL dblock_release_share(?, ?, ?)`
	s.ReleaseJoined = `CALL dblock_release_joined_share(?, ?, ?)`
	s.TakeFree = mariadbNoWait + mariadbTakeFreeRead
	s.ReleaseRecorded = mariadbShortWait + mariadbReleaseRecorded
	s.RecordedToken = "SELECT version FROM dblock_locks WHERE name = ? AND owner = ''"
	s.Join = mariadbShortWait + mariadbJoinRead
	s.LeaveJoined = mariadbNoWait + mariadbLeaveJoined
	return s
}()

// mariadbLeaveJoined deletes a joined share with one entry where another
// reader's share reaches the end of the period, and row-locks one such
// share to the commit (see SharedSQL.LeaveJoined): the fast way of
// dblock_release_joined_share (MySQL migration 00023) as one statement.
// The share locked is the next owner's after this one (else the first
// before it), so the releasers of one name lock different shares. The
// server evaluates the subqueries before it locks the share to delete, so
// the statement must not wait (mariadbNoWait): a share to delete that
// another release holds locked fails it at once (1205), as a lock wait
// could close a cycle. Arguments: name, owner, token, then name, owner,
// token, name, token twice (the share after, the share before).
var mariadbLeaveJoined = `DELETE FROM dblock_shares
WHERE name = ? AND owner = ? AND token = ? AND reentry = 1
  AND (EXISTS (` + mariadbReachingShare(">") + `) OR EXISTS (` + mariadbReachingShare("<") + `))`

// mariadbReachingShare is the lock of one share of another reader, owner
// cmp the releaser's, that reaches the period's end (arguments name,
// owner, token, name, token).
func mariadbReachingShare(cmp string) string {
	return `SELECT 1 FROM dblock_shares o
      WHERE o.name = ? AND o.owner ` + cmp + ` ? AND o.token = ?
        AND o.expires_at >= (SELECT l.expires_at FROM dblock_locks l
                             WHERE l.name = ? AND l.owner = '' AND l.version = ? AND l.expires_at > UTC_TIMESTAMP(6))
      LIMIT 1 FOR UPDATE SKIP LOCKED`
}

// mariadbJoinRead joins a readers' period without writing the name's row
// (see SharedSQL.Join): dblock_acquire_read's join without the row's lock
// (MySQL migration 00025) as one insert, whose select holds the row's
// share lock to its commit, as the procedure's read does: a release that
// counts the period's readers under the row's lock sees the share. The
// share ends with the period at the latest; the period must last half the
// TTL, have no reader recorded in the row and no waiting writer. The
// assignments run in order, token's last. Arguments: owner, TTL (µs),
// metadata, name, half the TTL (µs).
const mariadbJoinRead = `INSERT INTO dblock_shares (name, owner, token, reentry, acquired_at, expires_at, metadata)
SELECT l.name, ?, l.version, 1, UTC_TIMESTAMP(6), LEAST(UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, l.expires_at), ?
FROM dblock_locks l
WHERE l.name = ? AND l.owner = '' AND l.reader IS NULL AND l.expires_at > UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
  AND (l.wanted_until IS NULL OR l.wanted_until <= UTC_TIMESTAMP(6))
LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
    reentry     = IF(dblock_shares.token = VALUES(token), dblock_shares.reentry + 1, 1),
    expires_at  = IF(dblock_shares.token = VALUES(token), GREATEST(dblock_shares.expires_at, VALUES(expires_at)), VALUES(expires_at)),
    acquired_at = IF(dblock_shares.token = VALUES(token), dblock_shares.acquired_at, VALUES(acquired_at)),
    metadata    = IF(dblock_shares.token = VALUES(token), dblock_shares.metadata, VALUES(metadata)),
    token       = VALUES(token)
RETURNING token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)`

// mariadbTakeFreeRead begins a readers' period on a name's existing row
// when no live lease holds it and no other owner's live reservation keeps
// it, its reader recorded in the row (see SharedSQL.TakeFree): the begin of
// dblock_acquire_read (MySQL migration 00025) as a plain update, the token
// as the insert id. Arguments: metadata, TTL (µs), owner, name, owner.
const mariadbTakeFreeRead = `UPDATE dblock_locks SET
    reentry      = 1,
    version      = LAST_INSERT_ID(version + 1),
    mode         = '` + readMode + `',
    acquired_at  = UTC_TIMESTAMP(6),
    metadata     = ?,
    expires_at   = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
    shared_until = NULL,
    next_owner   = NULL,
    next_since   = NULL,
    next_until   = NULL,
    updated_at   = UTC_TIMESTAMP(6),
    reader       = ?,
    owner        = ''
WHERE name = ? AND (owner IS NULL OR expires_at <= UTC_TIMESTAMP(6))
  AND (next_until IS NULL OR next_until <= UTC_TIMESTAMP(6) OR next_owner <=> ?)`

// mariadbReleaseRecorded gives up one entry of the reader recorded in a
// name's row, freeing the name with the last (see
// SharedSQL.ReleaseRecorded): dblock_release_share's first update as a
// plain one. The assignments run in order: reentry's last, as the others
// read the count before it. Arguments: name, owner, token.
const mariadbReleaseRecorded = `UPDATE dblock_locks SET
    owner      = IF(reentry > 1, owner, NULL),
    reader     = IF(reentry > 1, reader, NULL),
    expires_at = IF(reentry > 1, expires_at, NULL),
    metadata   = IF(reentry > 1, metadata, NULL),
    updated_at = UTC_TIMESTAMP(6),
    reentry    = IF(reentry > 1, reentry - 1, 0)
WHERE name = ? AND owner = '' AND reader = ? AND version = ?`
