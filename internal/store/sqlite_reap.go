package store

import (
	"context"
	"database/sql"
)

// SQLite's reaper engine: one writer at a time, so no statement needs a row
// lock. A batch of expired leases or dead waiters is one statement reporting
// its affected rows; an idle batch reads the idle rows, raises the fencing
// floor to their highest version and deletes them in one write transaction.

func (d sqliteDialect) reapExpired(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	return reapCounted(ctx, db, d, d.Reap().FreeExpired, p)
}

func (d sqliteDialect) reapWaiters(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	return reapCounted(ctx, db, d, d.Reap().DeleteWaiters, p, p.Age.Microseconds())
}

// reapIdle raises the floor and deletes in the same write transaction.
func (d sqliteDialect) reapIdle(ctx context.Context, db *DB, p ReapParams) (ReapResult, error) {
	s := d.Reap()
	age := p.Age.Microseconds()
	var res ReapResult
	err := db.reapTx(ctx, nil, func(tx *sql.Tx) error {
		names, maxVersion, err := db.lockIdle(ctx, tx, s.LockIdle, age, p.Limit)
		if err != nil {
			return err
		}
		res.More = len(names) >= p.Limit
		if len(names) == 0 {
			return nil
		}
		if err := db.raiseFloorTx(ctx, tx, maxVersion); err != nil {
			return err
		}
		res.Rows, err = db.deleteIdle(ctx, tx, names, age, maxVersion)
		res.MaxVersion = maxVersion
		return err
	})
	return res, err
}

// checkFloor checks that the fencing floor's row exists.
func (sqliteDialect) checkFloor(ctx context.Context, db *DB) error {
	_, err := db.readFloor(ctx, db)
	return db.Classify(err)
}

// reapCount runs a one-statement batch (limit first, then args) and
// reports its affected rows.
func (sqliteDialect) reapCount(ctx context.Context, db *DB, query string, limit int, args ...any) (int, error) {
	r, err := db.ExecContext(ctx, query, append([]any{limit}, args...)...)
	if err != nil {
		return 0, db.Classify(err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return 0, db.Classify(err)
	}
	return int(n), nil
}

// lockIdle runs a statement returning (name, version) rows in tx and reports
// the names and the highest version.
func (db *DB) lockIdle(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]any, int64, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, 0, err
	}
	return scanIdle(rows)
}

// raiseFloorTx raises the fencing floor to at least v in tx (SQLite),
// skipping the write when the floor, which only grows, is already there.
func (db *DB) raiseFloorTx(ctx context.Context, tx *sql.Tx, v int64) error {
	floor, err := db.readFloor(ctx, tx)
	if err != nil || floor >= v {
		return err
	}
	_, err = tx.ExecContext(ctx, db.Dialect.Reap().RaiseFloor, v)
	return err
}
