package store

// MySQL's and MariaDB's listings for `dblock status` (the same text on
// both): times read as µs since the epoch (myUs), and the clock as
// UTC_TIMESTAMP(6).

func (mysqlDialect) listLocksSQL(reserved bool, filter string) string {
	return `SELECT name, owner, version, reentry, IFNULL(mode, ''),
    IFNULL(` + myUs("acquired_at") + `, 0), IFNULL(` + myUs("expires_at") + `, 0),
    ` + myUs("updated_at") + `, IFNULL(metadata, ''), ` + myUs("UTC_TIMESTAMP(6)") + `,
    ` + mysqlNextCols + `
FROM dblock_locks WHERE ` + lockRowsWhere(reserved, "UTC_TIMESTAMP(6)") + filter + `
ORDER BY name`
}

func (mysqlDialect) listWaitersSQL(filter string) string {
	return `SELECT id, name, owner, kind, position, ` + myUs("created_at") + `, ` + myUs("heartbeat_at") + `,
    ` + myUs("expires_at") + `, ` + myUs("UTC_TIMESTAMP(6)") + `
FROM (
    SELECT w.*, ROW_NUMBER() OVER (PARTITION BY w.name, w.kind = 'semaphore' ORDER BY w.created_at, w.id) AS position
    FROM dblock_waiters w WHERE w.expires_at > UTC_TIMESTAMP(6)` + filter + `
) q
ORDER BY name, position`
}
