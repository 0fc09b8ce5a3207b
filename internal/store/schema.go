package store

import (
	"context"
	"database/sql"
	"errors"
)

// schemaEngine is the binding of the schema and cluster checks on one
// database (see engine).
type schemaEngine interface {
	// probeTokens checks that the source of fencing tokens is usable.
	probeTokens(ctx context.Context, db *DB) error
	// rowLocksExclusive is RowLocksExclusive.
	rowLocksExclusive(ctx context.Context, db *DB) (bool, error)
}

// Probe statements: each reads no row (or the one fence row) but names every
// column the lock statements use, so it fails as they would.
const (
	probeLocks   = `SELECT name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata, next_owner, next_since, next_until, reader FROM dblock_locks WHERE 1 = 0`
	probeWaiters = `SELECT id, name, owner, created_at, heartbeat_at, expires_at FROM dblock_waiters WHERE 1 = 0`
	// probeListened: the column of the marks of listening, where releases are
	// announced (PostgreSQL; see listened.go).
	probeListened = `SELECT listened_until FROM dblock_locks WHERE 1 = 0`
)

// ProbeSchema checks, with reads only, that the objects dblock's statements
// use are there and readable by this connection's role: every column of
// dblock_locks and dblock_waiters, and the source of fencing tokens
// (PostgreSQL: the sequences of tokens and waiter ids, usable; MySQL and
// SQLite: the row of dblock_fence). It needs none of the goose version table. A missing
// object is an error wrapping dblock.ErrSchemaMissing with the migrate hint;
// a missing privilege is the server's error, which PermissionDenied
// recognises. It cannot tell whether a migration that adds only an index is
// applied.
func (db *DB) ProbeSchema(ctx context.Context) error {
	probes := []string{probeLocks, probeWaiters}
	if db.Dialect.Lease().MarkListened != "" {
		probes = append(probes, probeListened)
	}
	for _, q := range probes {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return db.Classify(err)
		}
		_ = rows.Close()
	}
	return db.Dialect.probeTokens(ctx, db)
}

// RowLocksExclusive reports whether a row lock on this database excludes
// every client: false on a MariaDB/MySQL node with Galera replication on
// (wsrep_on with a provider), true elsewhere.
func (db *DB) RowLocksExclusive(ctx context.Context) (bool, error) {
	return db.Dialect.rowLocksExclusive(ctx, db)
}

// probeFence reads the row of dblock_fence, the source of MySQL's and
// SQLite's fencing tokens.
const probeFence = `SELECT floor FROM dblock_fence WHERE id = 1`

// probeFenceRow checks that dblock_fence has its row (MySQL, SQLite).
func probeFenceRow(ctx context.Context, db *DB) error {
	var floor int64
	err := db.QueryRowxContext(ctx, probeFence).Scan(&floor)
	if errors.Is(err, sql.ErrNoRows) {
		return schemaMissing(db.Dialect, errors.New("dblock_fence has no row with id 1"))
	}
	return db.Classify(err)
}

func (mysqlDialect) probeTokens(ctx context.Context, db *DB) error  { return probeFenceRow(ctx, db) }
func (sqliteDialect) probeTokens(ctx context.Context, db *DB) error { return probeFenceRow(ctx, db) }

// postgresProbeSeq asks whether the role may use the sequences of tokens
// and waiter ids.
const postgresProbeSeq = `SELECT has_sequence_privilege('dblock_token_seq', 'USAGE')
    AND has_sequence_privilege(pg_get_serial_sequence('dblock_waiters', 'id'), 'USAGE')`

func (postgres) probeTokens(ctx context.Context, db *DB) error {
	var usable bool
	if err := db.QueryRowxContext(ctx, postgresProbeSeq).Scan(&usable); err != nil {
		return db.Classify(err)
	}
	if !usable {
		return errors.New("dblock: permission denied for the sequences dblock_token_seq and dblock_waiters_id_seq: grant USAGE on them to this role")
	}
	return nil
}

// Row locks are exclusive on PostgreSQL and (being one file) on SQLite.
func (postgres) rowLocksExclusive(context.Context, *DB) (bool, error)      { return true, nil }
func (sqliteDialect) rowLocksExclusive(context.Context, *DB) (bool, error) { return true, nil }
