package store

// SQLite's listings for `dblock status`: times are stored as µs since the
// epoch already, and the clock is sqliteNow.

func (sqliteDialect) listLocksSQL(reserved bool, filter string) string {
	return `SELECT name, owner, version, reentry, IFNULL(mode, ''),
    IFNULL(acquired_at, 0), IFNULL(expires_at, 0), updated_at, IFNULL(metadata, ''), ` + sqliteNow + `,
    ` + sqliteNextCols + `
FROM dblock_locks WHERE ` + lockRowsWhere(reserved, sqliteNow) + filter + `
ORDER BY name`
}

func (sqliteDialect) listWaitersSQL(filter string) string {
	return `SELECT id, name, owner, kind, position, created_at, heartbeat_at, expires_at, ` + sqliteNow + `
FROM (
    SELECT w.*, row_number() OVER (PARTITION BY w.name, w.kind = 'semaphore' ORDER BY w.created_at, w.id) AS position
    FROM dblock_waiters w WHERE w.expires_at > ` + sqliteNow + filter + `
) q
ORDER BY name, position`
}
