package store

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// server is what the engines of the server databases (PostgreSQL, MySQL and
// MariaDB) do alike, embedded in both: any pooled connection may write, and
// no statement needs a connection set up for it.
type server struct{}

// beginWriteTx is BeginWriteTx: a transaction on a connection of the pool
// (BeginPinned).
func (server) beginWriteTx(ctx context.Context, db *DB) (*sqlx.Tx, func(), error) {
	tx, end, err := db.BeginPinned(ctx, nil)
	return tx, end, db.Classify(err)
}

// onPool runs fn on the pool.
func (server) onPool(_ context.Context, db *DB, fn func(q Querier) error) error {
	return fn(db)
}
