package store

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
)

// A transaction begun on the pool whose context ends before Commit or
// Rollback is rolled back by database/sql from a goroutine of its own: the
// caller's Rollback then returns at once (sql.ErrTxDone), and the
// connection goes back to the pool some time later. A Locker closed right
// after such a statement (a renewal cut off by the lease's deadline) would
// return with a connection of the user's pool still counted in use.
// BeginPinned begins the transaction on a connection taken from the pool
// for it: sql.Conn's Close waits for the transaction to let go of the
// connection, so end returns once it is back (the one window left is
// database/sql's rollback goroutine closing the sql.Conn itself, between
// two of its own statements, where end's Close finds it closed already).

// BeginPinned begins a transaction on a connection of its own taken from
// the pool. Call end once the transaction is committed or rolled back (end
// rolls back one that is not, so it never waits for a transaction left
// open); the connection is back in the pool when end returns.
func (db *DB) BeginPinned(ctx context.Context, opts *sql.TxOptions) (tx *sqlx.Tx, end func(), err error) {
	return beginPinnedOn(ctx, db.DB, opts)
}

// pool is a connection pool (*sqlx.DB, and *DB, which embeds it).
type pool interface {
	Connx(ctx context.Context) (*sqlx.Conn, error)
}

// beginPinnedOn is BeginPinned on p.
func beginPinnedOn(ctx context.Context, p pool, opts *sql.TxOptions) (tx *sqlx.Tx, end func(), err error) {
	conn, err := p.Connx(ctx)
	if err != nil {
		return nil, nil, err
	}
	if tx, err = conn.BeginTxx(ctx, opts); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return tx, func() {
		_ = tx.Rollback()
		_ = conn.Close()
	}, nil
}
