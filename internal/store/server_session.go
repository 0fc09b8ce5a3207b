package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// What the session engines of PostgreSQL and MySQL/MariaDB do alike.

// writeLock: a write lock on the whole database is SQLite's alone.
func (server) writeLock(context.Context, *DB, Querier) error { return nil }

// querySessionID runs query, which answers the session's id, on q.
func (server) querySessionID(ctx context.Context, db *DB, q Querier, query string) (int64, error) {
	var id int64
	if err := q.QueryRowxContext(ctx, query).Scan(&id); err != nil {
		return 0, db.Classify(err)
	}
	return id, nil
}

// scanSessions runs the Alive statement on q for the distinct ids of refs
// (none when refs is empty) and calls scan on each row it returns. Errors
// of scan are returned as they are, the statement's classified.
func (server) scanSessions(ctx context.Context, db *DB, q Querier, refs []SessionRef, scan func(*sql.Rows) error) error {
	var (
		ph   []string
		args []any
		seen = map[int64]bool{}
	)
	for _, r := range refs {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		ph = append(ph, db.Dialect.Placeholder(len(ph)+1))
		args = append(args, r.ID)
	}
	if len(ph) == 0 {
		return nil
	}
	rows, err := q.QueryContext(ctx, fmt.Sprintf(db.Dialect.Row().Alive, strings.Join(ph, ", ")), args...)
	if err != nil {
		return db.Classify(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return db.Classify(rows.Err())
}
