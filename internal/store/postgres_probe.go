package store

import "context"

// PostgreSQL's probes: the candidates are the rows naming no live lease whose
// xmax is set (a row lock leaves it there), read again on the pool with FOR
// KEY SHARE SKIP LOCKED, which only a FOR UPDATE lock skips; the clock is
// clock_timestamp(), the time of the statement.

func (d postgres) probeTxHolds(ctx context.Context, db *DB, names []string, limit int) (TxHolds, error) {
	return d.probeRowLocks(ctx, db, names, limit, d)
}

func (postgres) txCandidatesSQL(filter string) string {
	return `SELECT name FROM dblock_locks WHERE (owner IS NULL OR expires_at IS NULL OR expires_at <= now()) AND xmax::text <> '0'` +
		filter + ` ORDER BY name`
}

func (postgres) unlockedNames(ctx context.Context, db *DB, names []string) ([]string, error) {
	query := `SELECT name FROM dblock_locks WHERE` + db.nameFilter("name", names, 1, " ") + ` FOR KEY SHARE SKIP LOCKED`
	return db.names(ctx, db, query, nameArgs(names))
}

func (postgres) clockNowSQL() string { return `SELECT ` + pgUs("clock_timestamp()") }
