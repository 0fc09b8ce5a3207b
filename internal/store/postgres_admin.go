package store

// PostgreSQL's listings for `dblock status`: times read as µs since the
// epoch (pgUs), and the clock as now().

func (postgres) listLocksSQL(reserved bool, filter string) string {
	return `SELECT name, owner, version, reentry, coalesce(mode, ''),
    coalesce(` + pgUs("acquired_at") + `, 0), coalesce(` + pgUs("expires_at") + `, 0),
    ` + pgUs("updated_at") + `, coalesce(metadata, ''), ` + pgUs("now()") + `,
    ` + pgNextCols + `
FROM dblock_locks WHERE ` + lockRowsWhere(reserved, "now()") + filter + `
ORDER BY name`
}

func (postgres) listWaitersSQL(filter string) string {
	return `SELECT id, name, owner, kind, position, ` + pgUs("created_at") + `, ` + pgUs("heartbeat_at") + `,
    ` + pgUs("expires_at") + `, ` + pgUs("now()") + `
FROM (
    SELECT w.*, row_number() OVER (PARTITION BY w.name, w.kind = 'semaphore' ORDER BY w.created_at, w.id) AS position
    FROM dblock_waiters w WHERE w.expires_at > now()` + filter + `
) q
ORDER BY name, position`
}
