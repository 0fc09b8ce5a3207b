package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dblock-go/dblock"
)

// PostgreSQL's take of a free name (LeaseSQL.TakeFree, see takefree.go).

// pgTakeFree runs TakeFree once on the pool: taken reports a lease; not
// taken (held, reserved for another owner, locked by a transaction, or no
// row), the name is forgotten and Acquire decides.
func (db *DB) pgTakeFree(ctx context.Context, p AcquireParams) (res AcquireResult, taken bool, err error) {
	r := &pgAcquireRow{}
	err = db.queryRow(ctx, db.DB, db.Dialect.Lease().TakeFree, r.bind(p), &r.version)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		db.free.Forget(p.Name)
		return AcquireResult{}, false, nil
	case err != nil:
		return AcquireResult{}, false, db.Classify(err)
	}
	return AcquireResult{Acquired: true, Token: dblock.Token(r.version), Reentry: 1, Statements: 1}, true, nil
}
