package store

import (
	"context"

	"github.com/dblock-go/dblock"
)

// tokenEngine is the binding of issuing fencing tokens on one database (see engine).
type tokenEngine interface {
	// bumpToken is BumpToken.
	bumpToken(ctx context.Context, db *DB, tx Querier, name string) (dblock.Token, error)
	// bumpTokenOn is BumpTokenOn.
	bumpTokenOn(ctx context.Context, db *DB, tx, side Querier, name string) (dblock.Token, error)
	// issueToken is IssueToken on q (not nil).
	issueToken(ctx context.Context, db *DB, q Querier, name string) (dblock.Token, error)
	// setToken is SetToken.
	setToken(ctx context.Context, db *DB, tx Querier, name string, t dblock.Token) (bool, error)
	// setIssuedToken is SetIssuedToken.
	setIssuedToken(ctx context.Context, db *DB, tx Querier, name string, t, last dblock.Token) (bool, error)
}

// BumpToken gives the row of name, locked by tx, a new fencing token, issued
// on the pool: BumpTokenOn(ctx, tx, nil, name). On SQLite, where nothing can
// commit while tx holds the database, it bumps the version inside tx instead,
// which is not durable before tx commits (a holder killed before its commit
// could see its token issued again); the pessimistic mode therefore issues
// SQLite tokens before it takes the lock.
func (db *DB) BumpToken(ctx context.Context, tx Querier, name string) (dblock.Token, error) {
	return db.Dialect.bumpToken(ctx, db, tx, name)
}

// BumpTokenOn gives the row of name, locked by tx, a new fencing token and
// returns it. The token is durable before it is returned: a holder killed
// before commit must never see its token issued again, even though the
// transaction's own writes roll back, and even after a crash or failover of
// the server. So the token is issued (IssueToken) in autocommit mode on side,
// a connection other than tx's (nil: the pool; pass a dedicated connection
// when holders may exhaust the pool), then written into the row in tx with
// SetToken. On SQLite, which cannot commit on another connection while tx
// holds the database, it returns an error wrapping dblock.ErrInvalidOption.
func (db *DB) BumpTokenOn(ctx context.Context, tx, side Querier, name string) (dblock.Token, error) {
	return db.Dialect.bumpTokenOn(ctx, db, tx, side, name)
}

// IssueToken issues a fencing token durably, in autocommit mode on q (nil:
// the pool), and returns it: a token no one has been given and no one will
// be given again, above every version name had. PostgreSQL takes it from
// dblock_token_seq and flushes it with its commit (see pgToken); MySQL and
// SQLite raise dblock_fence.floor above both its current value and name's
// version (lease acquisitions never go below floor + 1).
func (db *DB) IssueToken(ctx context.Context, q Querier, name string) (dblock.Token, error) {
	return db.Dialect.issueToken(ctx, db, db.q(q), name)
}

// SetToken writes an issued token into name's row inside tx. It reports false
// when the row is missing or already at or past the token (someone acquired
// the name between IssueToken and the lock): issue a new token and retry.
func (db *DB) SetToken(ctx context.Context, tx Querier, name string, t dblock.Token) (bool, error) {
	return db.Dialect.setToken(ctx, db, tx, name, t)
}

// SetIssuedToken writes into name's row, inside tx, a token t that was
// issued (IssueToken) before tx locked the database, as the pessimistic mode
// does on SQLite; last is the highest of the tokens issued together with t
// (AcquireMany issues one per name; t itself otherwise). It reports false,
// changing nothing, when the row is missing or already at or past t (a lease
// acquisition got past t), or, on SQLite, when a token was issued after last
// in the meantime (dblock_fence.floor is above last): that token may have
// been handed to a holder that died before its commit, leaving the row's
// version below it, and a holder with t would then come after it with a
// smaller token. Issue new tokens and try again. The floor is read by the
// same statement. Elsewhere it is SetToken: the server databases issue a
// token only once the row is locked (BumpTokenOn).
func (db *DB) SetIssuedToken(ctx context.Context, tx Querier, name string, t, last dblock.Token) (bool, error) {
	return db.Dialect.setIssuedToken(ctx, db, tx, name, t, last)
}
