package store

import "context"

// The user-rows engine of PostgreSQL and MySQL/MariaDB: row locks, taken by
// a locking read that may skip or refuse locked rows.

// checkUserRows: every option can be honoured.
func (server) checkUserRows(UserRowsParams) error { return nil }

// userRowsQuery adds the lock clause to the read.
func (server) userRowsQuery(_ context.Context, _ *DB, _ Querier, _, _, query string, p UserRowsParams) (string, error) {
	query += " FOR UPDATE"
	switch {
	case p.NoWait:
		query += " NOWAIT"
	case p.SkipLocked:
		query += " SKIP LOCKED"
	}
	return query, nil
}
