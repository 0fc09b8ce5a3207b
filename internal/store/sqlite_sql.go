// SQLite's statements, written out (?1 name, ?2 owner, ?3 ttl µs or version,
// ?4 mode, ?5 metadata for leases; times are stored as µs since the epoch).
// The code that binds and reads them is SQLite's engine
// (sqlite_<concern>.go, or the concern's file where every database runs a
// statement alike). testdata/sql/sqlite.sql holds them as the database
// sees them.

package store

var sqliteLease = LeaseSQL{
	Acquire: `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
VALUES (?1, ?2, 1, (SELECT floor + 1 FROM dblock_fence WHERE id = 1), ?4, CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?3, CAST(unixepoch('subsec') * 1000000 AS INTEGER), ?5)
` + sqliteTakeRow,

	// A holder that took the read lock too hands the name to readers on
	// its last release (see the PostgreSQL statement).
	Release: `UPDATE dblock_locks SET
    reentry      = CASE WHEN reentry > 1 THEN reentry - 1 WHEN shared_until > ` + sqliteNow + ` THEN 1 ELSE 0 END,
    owner        = CASE WHEN reentry > 1 THEN owner WHEN shared_until > ` + sqliteNow + ` THEN '' END,
    expires_at   = CASE WHEN reentry > 1 THEN expires_at WHEN shared_until > ` + sqliteNow + ` THEN shared_until END,
    mode         = CASE WHEN reentry <= 1 AND shared_until > ` + sqliteNow + ` THEN '` + readMode + `' ELSE mode END,
    shared_until = CASE WHEN reentry > 1 THEN shared_until END,
    updated_at   = ` + sqliteNow + `
WHERE name = ?1 AND owner = ?2 AND version = ?3`,

	Proclaim: `UPDATE dblock_locks SET metadata = ?4, updated_at = ` + sqliteNow + `
WHERE name = ?1 AND owner = ?2 AND version = ?3 AND expires_at > ` + sqliteNow,

	Renew: `UPDATE dblock_locks SET
    expires_at = max(expires_at, ` + sqliteNow + ` + ?4),
    updated_at = ` + sqliteNow + `
WHERE name = ?1 AND owner = ?2 AND version = ?3 AND expires_at > ` + sqliteNow,

	Holder: `SELECT IFNULL(owner, ''), version, IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `, reentry,
    ` + sqliteNextCols + `
FROM dblock_locks WHERE name = ?1`,

	Reserve: `UPDATE dblock_locks SET next_owner = ?2, next_since = ?3, next_until = ` + sqliteNow + ` + ?4
WHERE name = ?1 AND (next_until IS NULL OR next_until <= ` + sqliteNow + ` OR next_owner = ?2 OR next_since > ?3)`,

	Unreserve: `UPDATE dblock_locks SET next_owner = NULL, next_since = NULL, next_until = NULL
WHERE name = ?1 AND next_owner = ?2`,

	// SQLite has one writer: inside the caller's write transaction nobody
	// else can change the row before commit.
	Guard: `SELECT 1 FROM dblock_locks
WHERE name = ?1 AND owner = ?2 AND version = ?3 AND expires_at > ` + sqliteNow,

	// mode NULL marks the row freed by an administrator (the history's
	// trigger reads it); a release keeps the mode.
	ForceRelease: `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, mode = NULL, shared_until = NULL, updated_at = ` + sqliteNow + `
WHERE name = ?1 AND owner IS NOT NULL`,

	Exists: `SELECT 1 FROM dblock_locks WHERE name = ?1`,
}

// SQLite has no row locks: the lock is the write transaction itself (BEGIN
// IMMEDIATE, or the Ensure insert, which takes the write lock even when it
// inserts nothing), so a shared lock is the exclusive one.
const sqliteRowLock = `SELECT IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `, 0, 0, 0 FROM dblock_locks WHERE name = ?1`

var sqliteRow = RowSQL{
	Lock: sqliteRowLock, LockNoWait: sqliteRowLock, LockShared: sqliteRowLock, LockSharedNoWait: sqliteRowLock,
	Ensure: `INSERT INTO dblock_locks (name, reentry, version, updated_at)
VALUES (?1, 0, (SELECT floor + 1 FROM dblock_fence WHERE id = 1), ` + sqliteNow + `)
ON CONFLICT (name) DO NOTHING`,
	LockMany:       `SELECT name, IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `, 0, 0, 0 FROM dblock_locks WHERE name IN (%s) ORDER BY name%s`,
	LockManyNoWait: `SELECT name, IFNULL(owner, ''), IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `, 0, 0, 0 FROM dblock_locks WHERE name IN (%s) ORDER BY name%s`,
}

var sqliteQueue = QueueSQL{
	Enqueue: `INSERT INTO dblock_waiters (name, owner, kind, created_at, heartbeat_at, expires_at)
VALUES (?1, ?2, ?3, CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?4)
RETURNING id, created_at`,

	Heartbeat: `UPDATE dblock_waiters SET heartbeat_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER), expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?1
WHERE id = ?2 AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)`,

	HeartbeatMany: `UPDATE dblock_waiters SET heartbeat_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER), expires_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?1
WHERE expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) AND id IN (%s)`,

	Check: `SELECT
    CASE WHEN me.id IS NULL THEN 0 ELSE 1 END,
    CASE WHEN me.id IS NULL THEN 0 ELSE (
        SELECT COUNT(*) FROM dblock_waiters w
        WHERE w.name = ?1 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) AND w.kind <> 'semaphore'
          AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
    ) END,
    CASE WHEN me.id IS NULL THEN 0 ELSE COALESCE((
        SELECT w.expires_at FROM dblock_waiters w
        WHERE w.name = ?2 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) AND w.kind <> 'semaphore'
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
    (SELECT COUNT(*) FROM dblock_waiters w WHERE w.name = ?1 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) AND w.kind <> 'semaphore'),
    CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0),
    COALESCE(l.mode, ''), COALESCE(l.expires_at, 0), CAST(unixepoch('subsec') * 1000000 AS INTEGER)
FROM (SELECT 1 AS one) AS one
LEFT JOIN dblock_locks l ON l.name = ?2`,

	Take: `DELETE FROM dblock_waiters WHERE id = ?1 AND expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)`,

	Leave: `DELETE FROM dblock_waiters WHERE id = ?1`,

	Direct: sqliteDirect,

	GatePeek: sqliteGatePeek, GateCheck: sqliteGateCheck,
}

var sqliteGatePeek, sqliteGateCheck = gateSQL(sqliteNow, sqliteDialect{}.Placeholder)

// sqliteDirect is sqliteLease.Acquire guarded by the queue: it inserts (or
// upserts) nothing while a live waiter queues for the name, unless the owner
// holds it. SQLite has one writer, so nothing can enqueue in between.
const sqliteDirect = `INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
SELECT ?1, ?2, 1, (SELECT floor + 1 FROM dblock_fence WHERE id = 1), ?4, CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER) + ?3, CAST(unixepoch('subsec') * 1000000 AS INTEGER), ?5
WHERE NOT EXISTS (SELECT 1 FROM dblock_waiters w WHERE w.name = ?1 AND w.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER) AND w.kind <> 'semaphore')
   OR EXISTS (SELECT 1 FROM dblock_locks l WHERE l.name = ?1 AND l.owner = ?2 AND l.expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER))
` + sqliteTakeRow

// sqliteReservationEnds: a take by excluded.owner ends the reservation (it
// was that owner's, or it lapsed); sqliteNextCols, the reservation as
// Holder reads it (owner, since µs, until µs).
const (
	sqliteReservationEnds = `(next_owner = excluded.owner OR next_until <= ` + sqliteNow + `)`
	sqliteNextCols        = `IFNULL(next_owner, ''), IFNULL(next_since, 0), IFNULL(next_until, 0)`
)

// sqliteTakeRow is the takeover or re-entry of an existing row, shared by
// sqliteLease.Acquire and sqliteDirect: a free or expired row is taken
// unless a live reservation keeps it for another owner (see reserve.go),
// and a take clears the reservation when it was the owner's or lapsed.
// Every SET expression reads the row as it was.
const sqliteTakeRow = `ON CONFLICT (name) DO UPDATE SET
    reentry     = CASE WHEN owner = excluded.owner AND expires_at > ` + sqliteNow + ` THEN reentry + 1 ELSE 1 END,
    version     = CASE WHEN owner = excluded.owner AND expires_at > ` + sqliteNow + ` THEN version ELSE max(version + 1, excluded.version) END,
    mode        = CASE WHEN owner = excluded.owner AND expires_at > ` + sqliteNow + ` THEN mode ELSE excluded.mode END,
    acquired_at = CASE WHEN owner = excluded.owner AND expires_at > ` + sqliteNow + ` THEN acquired_at ELSE excluded.acquired_at END,
    metadata    = CASE WHEN owner = excluded.owner AND expires_at > ` + sqliteNow + ` THEN metadata ELSE excluded.metadata END,
    expires_at  = CASE WHEN owner = excluded.owner AND expires_at > ` + sqliteNow + ` THEN max(expires_at, excluded.expires_at) ELSE excluded.expires_at END,
    next_owner  = CASE WHEN ` + sqliteReservationEnds + ` THEN NULL ELSE next_owner END,
    next_since  = CASE WHEN ` + sqliteReservationEnds + ` THEN NULL ELSE next_since END,
    next_until  = CASE WHEN ` + sqliteReservationEnds + ` THEN NULL ELSE next_until END,
    owner       = excluded.owner,
    updated_at  = excluded.updated_at
WHERE (owner IS NULL OR owner = excluded.owner OR expires_at <= ` + sqliteNow + `)
  AND (owner = excluded.owner AND expires_at > ` + sqliteNow + ` OR next_until IS NULL OR next_until <= ` + sqliteNow + ` OR next_owner = excluded.owner)
RETURNING version, reentry`

var sqliteReap = ReapSQL{
	FreeExpired: `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = ` + sqliteNow + `
WHERE name IN (
    SELECT name FROM dblock_locks
    WHERE owner IS NOT NULL AND expires_at <= ` + sqliteNow + `
    ORDER BY expires_at LIMIT ?1
) AND owner IS NOT NULL AND expires_at <= ` + sqliteNow,

	DeleteWaiters: `DELETE FROM dblock_waiters
WHERE id IN (
    SELECT id FROM dblock_waiters WHERE expires_at <= ` + sqliteNow + ` - ?2
    ORDER BY expires_at LIMIT ?1
) AND expires_at <= ` + sqliteNow + ` - ?2`,

	LockIdle:         `SELECT name, version FROM dblock_locks WHERE owner IS NULL AND updated_at <= ` + sqliteNow + ` - ? LIMIT ?`,
	FenceFloor:       `SELECT floor FROM dblock_fence WHERE id = 1`,
	RaiseFloor:       `UPDATE dblock_fence SET floor = max(floor, ?) WHERE id = 1`,
	DeleteLockedIdle: `DELETE FROM dblock_locks WHERE name IN (%s) AND owner IS NULL AND updated_at <= ` + sqliteNow + ` - ? AND version <= ?`,

	Gauges: `SELECT
    (SELECT count(*) FROM dblock_locks WHERE owner IS NOT NULL AND expires_at > ` + sqliteNow + `),
    (SELECT count(*) FROM dblock_waiters WHERE expires_at > ` + sqliteNow + `),
    (SELECT count(*) FROM dblock_waiters WHERE expires_at <= ` + sqliteNow + `),
    IFNULL((SELECT ` + sqliteNow + ` - min(expires_at) FROM dblock_locks
            WHERE owner IS NOT NULL AND expires_at <= ` + sqliteNow + `), 0)`,
}

// sqliteGrantEntry is the history's insert of a share (mode read) or a
// semaphore grant that ended, its token the column tokenCol.
func sqliteGrantEntry(tokenCol, mode string) string {
	return `INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
    VALUES (OLD.name, OLD.owner, ` + tokenCol + `, '` + mode + `', OLD.acquired_at, ` + sqliteNow + `,
        CASE WHEN OLD.expires_at <= ` + sqliteNow + ` THEN 'expired' ELSE 'released' END, OLD.metadata)`
}

// sqliteHistory: see pgHistory.
var sqliteHistory = HistorySQL{
	Enable: []string{
		`DROP TRIGGER IF EXISTS dblock_history_ended`,
		`CREATE TRIGGER dblock_history_ended AFTER UPDATE ON dblock_locks FOR EACH ROW
WHEN OLD.owner IS NOT NULL AND OLD.owner <> '' AND (NEW.owner IS NOT OLD.owner OR NEW.version <> OLD.version)
BEGIN
    INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
    VALUES (OLD.name, OLD.owner, OLD.version, OLD.mode, OLD.acquired_at, ` + sqliteNow + `,
        CASE WHEN NEW.owner = '' AND NEW.version = OLD.version THEN 'released'
             WHEN NEW.owner IS NOT NULL AND NEW.owner <> OLD.owner THEN 'taken_over'
             WHEN NEW.owner IS NULL AND NEW.mode IS NULL THEN 'force_released'
             WHEN OLD.expires_at <= ` + sqliteNow + ` THEN 'expired'
             ELSE 'released' END,
        OLD.metadata);
END`,
		`DROP TRIGGER IF EXISTS dblock_history_share_ended`,
		`CREATE TRIGGER dblock_history_share_ended AFTER DELETE ON dblock_shares FOR EACH ROW
BEGIN
    ` + sqliteGrantEntry("OLD.token", readMode) + `;
END`,
		`DROP TRIGGER IF EXISTS dblock_history_share_replaced`,
		`CREATE TRIGGER dblock_history_share_replaced AFTER UPDATE ON dblock_shares FOR EACH ROW
WHEN NEW.token <> OLD.token
BEGIN
    ` + sqliteGrantEntry("OLD.token", readMode) + `;
END`,
		`DROP TRIGGER IF EXISTS dblock_history_grant_ended`,
		`CREATE TRIGGER dblock_history_grant_ended AFTER DELETE ON dblock_permits FOR EACH ROW
BEGIN
    ` + sqliteGrantEntry("OLD.id", "semaphore") + `;
END`,
	},
	Disable: []string{
		`DROP TRIGGER IF EXISTS dblock_history_ended`,
		`DROP TRIGGER IF EXISTS dblock_history_share_ended`,
		`DROP TRIGGER IF EXISTS dblock_history_share_replaced`,
		`DROP TRIGGER IF EXISTS dblock_history_grant_ended`,
	},
	Enabled: `SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name = 'dblock_history_ended'`,
	List: `SELECT name, owner, token, coalesce(mode, ''), coalesce(acquired_at, 0), ended_at, ended_how, coalesce(metadata, '')
FROM dblock_history WHERE ended_at >= ` + sqliteNow + ` - ?1
ORDER BY ended_at DESC, id DESC LIMIT ?2`,
	ListName: `SELECT name, owner, token, coalesce(mode, ''), coalesce(acquired_at, 0), ended_at, ended_how, coalesce(metadata, '')
FROM dblock_history WHERE name = ?1 AND ended_at >= ` + sqliteNow + ` - ?2
ORDER BY ended_at DESC, id DESC LIMIT ?3`,
	Prune: `DELETE FROM dblock_history WHERE id IN (
    SELECT id FROM dblock_history WHERE ended_at < ` + sqliteNow + ` - ?1 ORDER BY ended_at LIMIT ?2
)`,
	Record: `INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how)
VALUES (?1, ?2, ?3, ?4, ?5, ` + sqliteNow + `, ?6)`,
}

// sqliteShared: the write transaction is the lock (SQLite has one writer).
var sqliteShared = SharedSQL{
	LockRow: `SELECT IFNULL(owner, ''), owner IS NULL, version, IFNULL(mode, ''), IFNULL(expires_at, 0), ` + sqliteNow + `,
       IFNULL(shared_until, 0), IFNULL(wanted_until, 0), reentry,
       ` + sqliteNextCols + `, IFNULL(reader, '')
FROM dblock_locks WHERE name = ?1`,
	ReadShare:  `SELECT token, reentry, expires_at FROM dblock_shares WHERE name = ?1 AND owner = ?2`,
	LiveShares: `SELECT count(*), IFNULL(max(expires_at), 0) FROM dblock_shares WHERE name = ?1 AND token = ?2 AND expires_at > ?3`,
	Begin: `UPDATE dblock_locks SET owner = '', reentry = 1, version = version + 1, mode = '` + readMode + `',
    acquired_at = ?1, expires_at = ?2, shared_until = NULL, metadata = NULL, reader = NULL, updated_at = ` + sqliteNow + `,
    next_owner = NULL, next_since = NULL, next_until = NULL
WHERE name = ?3
RETURNING version`,
	Update: `UPDATE dblock_locks SET owner = ?1, reentry = ?2, expires_at = ?3, shared_until = ?4, updated_at = ` + sqliteNow + `
WHERE name = ?5`,
	PutShare: `INSERT INTO dblock_shares (name, owner, token, reentry, acquired_at, expires_at, metadata)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (name, owner) DO UPDATE SET
    token = excluded.token, reentry = excluded.reentry, acquired_at = excluded.acquired_at,
    expires_at = excluded.expires_at, metadata = excluded.metadata`,
	SetShare:  `UPDATE dblock_shares SET reentry = ?1, expires_at = ?2 WHERE name = ?3 AND owner = ?4`,
	DropShare: `DELETE FROM dblock_shares WHERE name = ?1 AND owner = ?2`,
	Want: `UPDATE dblock_locks SET wanted_until = max(IFNULL(wanted_until, ` + sqliteNow + `), ` + sqliteNow + ` + ?1)
WHERE name = ?2 AND owner = ''`,
	Unwant: `UPDATE dblock_locks SET wanted_until = NULL WHERE name = ?1 AND wanted_until IS NOT NULL`,
	Holder: `SELECT s.token, s.reentry, s.expires_at, ` + sqliteNow + `, l.owner, l.owner IS NULL, l.version
FROM dblock_shares s LEFT JOIN dblock_locks l ON l.name = s.name
WHERE s.name = ?1 AND s.owner = ?2
UNION ALL
SELECT version, reentry, expires_at, ` + sqliteNow + `, owner, 0, version
FROM dblock_locks WHERE name = ?3 AND owner = '' AND reader = ?4
ORDER BY 1 DESC LIMIT 1`,
	List: `SELECT name, owner, token, reentry, acquired_at, expires_at
FROM dblock_shares WHERE expires_at > ` + sqliteNow + ` ORDER BY name, owner`,
}

// sqliteSemaphore: the write transaction is the lock.
var sqliteSemaphore = SemaphoreSQL{
	Ensure: `INSERT INTO dblock_semaphores (name, lim, updated_at) VALUES (?1, ?2, ` + sqliteNow + `) ON CONFLICT (name) DO NOTHING`,
	Lock:   `UPDATE dblock_semaphores SET updated_at = ` + sqliteNow + ` WHERE name = ?1 RETURNING lim, ` + sqliteNow,
	Used: `SELECT IFNULL(sum(permits), 0), IFNULL(min(expires_at), 0)
FROM dblock_permits WHERE name = ?1 AND expires_at > ?2`,
	Grant: `INSERT INTO dblock_permits (name, owner, permits, acquired_at, expires_at, metadata, request)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
RETURNING id`,
	Granted: `SELECT id, expires_at, ` + sqliteNow + ` FROM dblock_permits WHERE name = ?1 AND request = ?2`,
	Renew: `UPDATE dblock_permits SET expires_at = max(expires_at, ` + sqliteNow + ` + ?1)
WHERE id = ?2 AND owner = ?3 AND expires_at > ` + sqliteNow,
	Release: `DELETE FROM dblock_permits WHERE id = ?1 AND owner = ?2 AND expires_at > ` + sqliteNow,
	Holder:  `SELECT owner, expires_at, ` + sqliteNow + ` FROM dblock_permits WHERE id = ?1`,
	SetLimit: `INSERT INTO dblock_semaphores (name, lim, updated_at) VALUES (?1, ?2, ` + sqliteNow + `)
ON CONFLICT (name) DO UPDATE SET lim = excluded.lim, updated_at = excluded.updated_at`,
	Read: `SELECT s.lim, (SELECT IFNULL(sum(p.permits), 0) FROM dblock_permits p WHERE p.name = s.name AND p.expires_at > ` + sqliteNow + `)
FROM dblock_semaphores s WHERE s.name = ?1`,
	List: `SELECT id, name, owner, permits, acquired_at, expires_at
FROM dblock_permits WHERE expires_at > ` + sqliteNow + ` ORDER BY name, id`,
}

var sqliteSharedReap = SharedReapSQL{
	DeleteShares: `DELETE FROM dblock_shares WHERE rowid IN (
    SELECT s.rowid FROM dblock_shares s
    WHERE s.expires_at < ` + sqliteNow + ` - ?1
      AND NOT EXISTS (SELECT 1 FROM dblock_locks l
                      WHERE l.name = s.name AND l.version = s.token AND l.owner IN ('', s.owner) AND l.expires_at > ` + sqliteNow + `)
    ORDER BY s.expires_at LIMIT ?2
)`,
	DeleteGrants: `DELETE FROM dblock_permits WHERE id IN (
    SELECT id FROM dblock_permits WHERE expires_at < ` + sqliteNow + ` - ?1 ORDER BY expires_at LIMIT ?2
)`,
	DeleteSemaphores: `DELETE FROM dblock_semaphores WHERE name IN (
    SELECT s.name FROM dblock_semaphores s
    WHERE s.updated_at < ` + sqliteNow + ` - ?1 AND NOT EXISTS (SELECT 1 FROM dblock_permits p WHERE p.name = s.name)
    LIMIT ?2
)`,
}

var sqliteSlots = SlotSQL{
	Claim: `INSERT INTO dblock_slots (job, last_slot, updated_at) VALUES (?1, ?2, ` + sqliteNow + `)
ON CONFLICT (job) DO UPDATE SET last_slot = excluded.last_slot, updated_at = excluded.updated_at
WHERE dblock_slots.last_slot < excluded.last_slot`,
	Last: `SELECT last_slot FROM dblock_slots WHERE job = ?1`,
	Keep: `UPDATE dblock_locks SET expires_at = acquired_at + ?1, updated_at = ` + sqliteNow + `
WHERE name = ?2 AND owner = ?3 AND version = ?4 AND reentry = 1 AND expires_at > ` + sqliteNow + `
  AND acquired_at + ?5 > ` + sqliteNow,
}
