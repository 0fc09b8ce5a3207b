package store

import (
	"context"
	"database/sql"
	"errors"

	"github.com/dblock-go/dblock"
)

// MySQL's and MariaDB's token engine: a token raises dblock_fence.floor
// above both its value and the name's version, and comes back as the
// insert id.

// issueToken reads the name's version with a consistent read, which does
// not wait for the row lock its caller may hold, then raises the floor.
func (mysqlDialect) issueToken(ctx context.Context, db *DB, q Querier, name string) (dblock.Token, error) {
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
}

func (mysqlDialect) setToken(ctx context.Context, db *DB, tx Querier, name string, t dblock.Token) (bool, error) {
	return db.execOne(ctx, tx, "UPDATE dblock_locks SET version = ? WHERE name = ? AND version < ?", int64(t), name, int64(t))
}
