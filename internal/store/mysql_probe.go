package store

import (
	"context"
	"database/sql"
)

// MySQL's and MariaDB's probes: the candidates are the rows naming no live
// lease, read again by primary key with a shared lock that skips locked rows
// (MariaDB: LOCK IN SHARE MODE SKIP LOCKED, MySQL 8: FOR SHARE SKIP LOCKED)
// in a READ COMMITTED transaction of its own; the clock is UTC_TIMESTAMP(6).

func (d mysqlDialect) probeTxHolds(ctx context.Context, db *DB, names []string, limit int) (TxHolds, error) {
	return d.probeRowLocks(ctx, db, names, limit, d)
}

func (mysqlDialect) txCandidatesSQL(filter string) string {
	return `SELECT name FROM dblock_locks WHERE (owner IS NULL OR expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))` +
		filter + ` ORDER BY name`
}

// unlockedNames reads the rows of names with sharedSkipLockedSQL. InnoDB
// takes no lock for a locking read in autocommit mode, so it would skip
// nothing: the read runs in a transaction of its own, READ COMMITTED so that
// it locks no gap, rolled back at once.
func (d mysqlDialect) unlockedNames(ctx context.Context, db *DB, names []string) ([]string, error) {
	query := d.sharedSkipLockedSQL(db.nameFilter("name", names, 1, " "))
	tx, end, err := db.BeginPinned(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, db.Classify(err)
	}
	defer end()
	return db.names(ctx, tx, query, nameArgs(names))
}

// sharedSkipLockedSQL returns the probe's locking read of the names that
// filter (" name IN (...)") lists. It reads through the primary key, where a
// pessimistic holder's lock is: through a covering secondary index the
// shared lock would be taken on that index's records, which conflict with
// nothing the holder locked.
func (d mysqlDialect) sharedSkipLockedSQL(filter string) string {
	if d.mariadb {
		return `SELECT name FROM dblock_locks FORCE INDEX (PRIMARY) WHERE` + filter + ` LOCK IN SHARE MODE SKIP LOCKED`
	}
	return `SELECT name FROM dblock_locks FORCE INDEX (PRIMARY) WHERE` + filter + ` FOR SHARE SKIP LOCKED`
}

func (mysqlDialect) clockNowSQL() string { return `SELECT ` + myUs("UTC_TIMESTAMP(6)") }
