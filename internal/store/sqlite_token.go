package store

import (
	"context"
	"fmt"

	"github.com/dblock-go/dblock"
)

// SQLite's token engine: nothing can commit on another connection while a
// holder's transaction holds the database, so a pessimistic holder's token
// is issued (dblock_fence.floor raised) before it takes the lock, and
// written into the row only if no token was issued after it.

// bumpToken bumps the version inside tx, which is not durable before tx
// commits (see BumpToken).
func (sqliteDialect) bumpToken(ctx context.Context, db *DB, tx Querier, name string) (dblock.Token, error) {
	var v int64
	err := tx.QueryRowxContext(ctx, "UPDATE dblock_locks SET version = version + 1 WHERE name = ?1 RETURNING version", name).Scan(&v)
	return dblock.Token(v), db.Classify(err)
}

// bumpTokenOn is refused: no token can be issued durably once tx holds the
// database.
func (sqliteDialect) bumpTokenOn(_ context.Context, _ *DB, _, _ Querier, name string) (dblock.Token, error) {
	return 0, fmt.Errorf("bump token %q: %w: on SQLite a token is issued before the lock is taken; ask for it with the first acquisition", name, dblock.ErrInvalidOption)
}

// issueToken raises the floor above its value and the name's version in
// one statement.
func (sqliteDialect) issueToken(ctx context.Context, db *DB, q Querier, name string) (dblock.Token, error) {
	var t int64
	err := q.QueryRowxContext(ctx, `UPDATE dblock_fence
SET floor = max(floor + 1, IFNULL((SELECT version + 1 FROM dblock_locks WHERE name = ?1), 0))
WHERE id = 1 RETURNING floor`, name).Scan(&t)
	return dblock.Token(t), db.Classify(err)
}

func (sqliteDialect) setToken(ctx context.Context, db *DB, tx Querier, name string, t dblock.Token) (bool, error) {
	return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = ?1 WHERE name = ?2 AND version < ?1", int64(t), name)
}

// setIssuedToken also refuses t when a token was issued after last (the
// floor is above it), reading the floor in the same statement.
func (sqliteDialect) setIssuedToken(ctx context.Context, db *DB, tx Querier, name string, t, last dblock.Token) (bool, error) {
	return db.execOne(ctx, tx, `UPDATE dblock_locks SET version = ?1
WHERE name = ?2 AND version < ?1 AND (SELECT floor FROM dblock_fence WHERE id = 1) <= ?3`, int64(t), name, int64(last))
}
