package store

import (
	"context"
)

// SQLite's row-lock engine: the locking transaction's write lock on the
// database is the lock of every row, so the lock statements only read, and
// the insert of a missing row runs inside that transaction.

func (d sqliteDialect) ensureRow(ctx context.Context, db *DB, q Querier, name string) error {
	return db.insertRow(ctx, q, d.Row().Ensure, name)
}

func (d sqliteDialect) lockRow(ctx context.Context, _ *DB, tx Querier, name string, _ RowLockParams, dest []any) error {
	return tx.QueryRowxContext(ctx, d.Row().Lock, name).Scan(dest...)
}

// lockRows: no lock clause follows the statement.
func (d sqliteDialect) lockRows(_ context.Context, _ *DB, _ Querier, names []string, p RowLockParams, run func(string, []any) error) error {
	query, args := lockManyQuery(d, p.NoWait, nil, names, "")
	return run(query, args)
}

// sessionRef: SQLite has no session id; the statement answers zeroes.
func (sqliteDialect) sessionRef(id, _, nowUs, bound int64) SessionRef {
	return SessionRef{ID: id, At: Micros(nowUs), Bound: bound}
}
