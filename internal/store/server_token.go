package store

import (
	"context"
	"fmt"

	"github.com/dblock-go/dblock"
)

// The token engine of PostgreSQL and MySQL/MariaDB alike: a token is issued
// in autocommit mode on a connection other than the holder's, durable
// before the holder writes it into its locked row.

// bumpToken issues the token on the pool.
func (server) bumpToken(ctx context.Context, db *DB, tx Querier, name string) (dblock.Token, error) {
	return db.BumpTokenOn(ctx, tx, nil, name)
}

// bumpTokenOn issues a token on side and writes it into the row in tx,
// issuing again while a token issued after it reached the row first.
func (server) bumpTokenOn(ctx context.Context, db *DB, tx, side Querier, name string) (dblock.Token, error) {
	for range 3 {
		t, err := db.IssueToken(ctx, side, name)
		if err != nil {
			return 0, err
		}
		ok, err := db.SetToken(ctx, tx, name, t)
		if err != nil {
			return 0, err
		}
		if ok {
			return t, nil
		}
		// The row is missing, or at or past t: a token issued after ours
		// reached it before tx locked it. Issue again, a few times at most.
	}
	return 0, fmt.Errorf("bump token %q: the row's version stays ahead of newly issued tokens (or the row is missing)", name)
}

// setIssuedToken is setToken: the server databases issue a token only once
// the row is locked.
func (server) setIssuedToken(ctx context.Context, db *DB, tx Querier, name string, t, _ dblock.Token) (bool, error) {
	return db.SetToken(ctx, tx, name, t)
}
