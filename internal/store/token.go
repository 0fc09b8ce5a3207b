package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dblock-go/dblock"
)

// tokenEngine is the binding of issuing fencing tokens on one database (see engine).
type tokenEngine interface{}

// BumpToken gives the row of name, locked by tx, a new fencing token, issued
// on the pool: BumpTokenOn(ctx, tx, nil, name). On SQLite, where nothing can
// commit while tx holds the database, it bumps the version inside tx instead,
// which is not durable before tx commits (a holder killed before its commit
// could see its token issued again); the pessimistic mode therefore issues
// SQLite tokens before it takes the lock.
func (db *DB) BumpToken(ctx context.Context, tx Querier, name string) (dblock.Token, error) {
	if db.Dialect.Kind() == SQLite {
		var v int64
		err := tx.QueryRowxContext(ctx, "UPDATE dblock_locks SET version = version + 1 WHERE name = ?1 RETURNING version", name).Scan(&v)
		return dblock.Token(v), db.Classify(err)
	}
	return db.BumpTokenOn(ctx, tx, nil, name)
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
	if db.Dialect.Kind() == SQLite {
		return 0, fmt.Errorf("bump token %q: %w: on SQLite a token is issued before the lock is taken; ask for it with the first acquisition", name, dblock.ErrInvalidOption)
	}
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

// IssueToken issues a fencing token durably, in autocommit mode on q (nil:
// the pool), and returns it: a token no one has been given and no one will
// be given again, above every version name had. PostgreSQL takes it from
// dblock_token_seq and flushes it with its commit (see pgToken); MySQL and
// SQLite raise dblock_fence.floor above both its current value and name's
// version (lease acquisitions never go below floor + 1).
func (db *DB) IssueToken(ctx context.Context, q Querier, name string) (dblock.Token, error) {
	q = db.q(q)
	switch db.Dialect.Kind() {
	case Postgres:
		var t int64
		err := q.QueryRowxContext(ctx, db.Dialect.Row().Token).Scan(&t)
		return dblock.Token(t), db.Classify(err)
	case MySQL:
		// A consistent read: it does not wait for the row lock its caller may hold.
		var v int64
		err := q.QueryRowxContext(ctx, "SELECT version FROM dblock_locks WHERE name = ?", name).Scan(&v)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, db.Classify(err)
		}
		r, err := q.ExecContext(ctx, "UPDATE dblock_fence SET floor = LAST_INSERT_ID(GREATEST(floor + 1, ?)) WHERE id = 1", v+1)
		if err != nil {
			return 0, db.Classify(err)
		}
		id, err := r.LastInsertId()
		return dblock.Token(id), err
	case SQLite:
		var t int64
		err := q.QueryRowxContext(ctx, `UPDATE dblock_fence
SET floor = max(floor + 1, IFNULL((SELECT version + 1 FROM dblock_locks WHERE name = ?1), 0))
WHERE id = 1 RETURNING floor`, name).Scan(&t)
		return dblock.Token(t), db.Classify(err)
	}
	return 0, fmt.Errorf("issue token: %w: unknown dialect %s", dblock.ErrInvalidOption, db.Dialect.Kind())
}

// SetToken writes an issued token into name's row inside tx. It reports false
// when the row is missing or already at or past the token (someone acquired
// the name between IssueToken and the lock): issue a new token and retry.
func (db *DB) SetToken(ctx context.Context, tx Querier, name string, t dblock.Token) (bool, error) {
	switch db.Dialect.Kind() {
	case SQLite:
		return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = ?1 WHERE name = ?2 AND version < ?1", int64(t), name)
	case Postgres:
		return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = $1 WHERE name = $2 AND version < $1", int64(t), name)
	}
	return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = ? WHERE name = ? AND version < ?", int64(t), name, int64(t))
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
	if db.Dialect.Kind() != SQLite {
		return db.SetToken(ctx, tx, name, t)
	}
	return db.execOne(ctx, tx, `UPDATE dblock_locks SET version = ?1
WHERE name = ?2 AND version < ?1 AND (SELECT floor FROM dblock_fence WHERE id = 1) <= ?3`, int64(t), name, int64(last))
}
