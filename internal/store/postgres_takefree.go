package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dblock-go/dblock"
)

// PostgreSQL's take of a free name (LeaseSQL.TakeFree, see takefree.go).

// takeFree: no row means nothing was taken (held, reserved for another
// owner, locked by a transaction, or no row).
func (postgres) takeFree(ctx context.Context, db *DB, p AcquireParams) (AcquireResult, freeTake, error) {
	r := &acquireRow{}
	err := db.queryRow(ctx, db, db.Dialect.Lease().TakeFree, r.bind(p), &r.version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return AcquireResult{}, takeMissed, nil
	case err != nil:
		return AcquireResult{}, takeMissed, db.Classify(err)
	}
	return AcquireResult{Acquired: true, Token: dblock.Token(r.version), Reentry: 1, Statements: 1}, takeTaken, nil
}
