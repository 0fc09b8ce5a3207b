package store

import (
	"context"

	"github.com/dblock-go/dblock"
)

// PostgreSQL's token engine: tokens come from dblock_token_seq, flushed
// with the commit of the statement that takes them (RowSQL.Token).

func (d postgres) issueToken(ctx context.Context, db *DB, q Querier, _ string) (dblock.Token, error) {
	var t int64
	err := q.QueryRowxContext(ctx, d.Row().Token).Scan(&t)
	return dblock.Token(t), db.Classify(err)
}

func (postgres) setToken(ctx context.Context, db *DB, tx Querier, name string, t dblock.Token) (bool, error) {
	return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = $1 WHERE name = $2 AND version < $1", int64(t), name)
}
