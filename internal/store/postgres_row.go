package store

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"
)

// PostgreSQL's row-lock engine: the lock statements set the transaction's
// idle bound and lock_timeout themselves (local to the transaction), and
// lock_timeout goes back to its default once a waiting lock is had.

func (d postgres) ensureRow(ctx context.Context, db *DB, q Querier, name string) error {
	return db.insertRow(ctx, q, d.Row().Ensure, name)
}

func (d postgres) lockRow(ctx context.Context, db *DB, tx Querier, name string, p RowLockParams, dest []any) error {
	rs := d.Row()
	idle := pgMillis(db.HoldBound(p.IdleTimeout))
	if p.NoWait {
		return db.queryRowPinned(ctx, tx, p.Conn, rs.lockText(p), []any{name, idle}, dest)
	}
	err := db.queryRowPinned(ctx, tx, p.Conn, rs.lockText(p), []any{name, idle, pgMillis(waitFor(ctx, p.Wait))}, dest)
	if err == nil {
		err = db.execPinned(ctx, tx, p.Conn, "SET LOCAL lock_timeout TO DEFAULT")
	}
	return err
}

// queryRowPinned scans the first row of query into dest, in tx, which runs
// on conn: through the driver's native interface when it has one and conn
// is known, else through tx.
func (db *DB) queryRowPinned(ctx context.Context, tx Querier, conn *sql.Conn, query string, args, dest []any) error {
	if conn != nil && db.native != nil && db.native.QueryRowOn != nil {
		return db.native.QueryRowOn(ctx, conn, query, args, dest...)
	}
	return tx.QueryRowxContext(ctx, query, args...).Scan(dest...)
}

// execPinned is queryRowPinned for a statement without rows.
func (db *DB) execPinned(ctx context.Context, tx Querier, conn *sql.Conn, query string) error {
	if conn != nil && db.native != nil && db.native.ExecOn != nil {
		_, err := db.native.ExecOn(ctx, conn, query)
		return err
	}
	_, err := tx.ExecContext(ctx, query)
	return err
}

// lockRows binds the idle bound and, unless NoWait, the lock timeout before
// the names.
func (d postgres) lockRows(ctx context.Context, db *DB, tx Querier, names []string, p RowLockParams, run func(string, []any) error) error {
	args := []any{pgMillis(db.HoldBound(p.IdleTimeout))}
	if !p.NoWait {
		args = append(args, pgMillis(waitFor(ctx, p.Wait)))
	}
	query, args := lockManyQuery(d, p.NoWait, args, names, d.lockManySuffix(p.NoWait))
	err := run(query, args)
	if err == nil && !p.NoWait {
		_, err = tx.ExecContext(ctx, "SET LOCAL lock_timeout TO DEFAULT")
	}
	return err
}

// sessionRef: the extra column is the locking transaction's now().
func (postgres) sessionRef(id, extra, nowUs, bound int64) SessionRef {
	return SessionRef{ID: id, TxStart: Micros(extra), At: Micros(nowUs), Bound: bound}
}

// pgMillis renders d as a PostgreSQL milliseconds setting; "0" disables.
func pgMillis(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	if ms > math.MaxInt32 {
		ms = math.MaxInt32
	}
	return fmt.Sprintf("%d", ms)
}
