package store

import "context"

// SQLite's session engine: no server and no sessions. Every session is
// alive, none can be cancelled or killed, and the one thing to do on a
// session is to take the database's write lock in its transaction.

// sqliteWriteLock changes nothing but, being a write, takes the database's
// write lock in a transaction begun DEFERRED; it is cheaper to prepare than
// the insert of EnsureRow.
const sqliteWriteLock = "UPDATE dblock_fence SET floor = floor WHERE 0"

// serverIncarnation: the zero Incarnation, which covers every SessionRef.
func (sqliteDialect) serverIncarnation(context.Context, *DB, Querier) (Incarnation, error) {
	return Incarnation{}, nil
}

func (sqliteDialect) sessionsAlive(_ context.Context, _ *DB, _ Querier, refs []SessionRef) ([]bool, error) {
	alive := make([]bool, len(refs))
	for i := range alive {
		alive[i] = true
	}
	return alive, nil
}

func (sqliteDialect) writeLock(ctx context.Context, db *DB, tx Querier) error {
	_, err := tx.ExecContext(ctx, sqliteWriteLock)
	return db.Classify(err)
}

func (sqliteDialect) sessionID(context.Context, *DB, Querier) (int64, error) { return 0, nil }

func (sqliteDialect) cancelStatement(context.Context, *DB, Querier, int64) error { return nil }

func (sqliteDialect) killSession(context.Context, *DB, Querier, int64) error { return nil }

func (sqliteDialect) sessionFromPort(context.Context, *DB, Querier, int64, int) (bool, error) {
	return false, nil
}
