package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/jmoiron/sqlx"
)

// An unwatched context: a query handed to database/sql under a context
// that can end makes database/sql start a goroutine that watches it until
// the query's rows are closed (Rows.awaitDone). On 2 cores that goroutine's
// start and wake-up cost the statements around the query: in a loop of
// fair pairs on MariaDB alternating the context of the acquisition's
// one-row check, the check took as long either way, and the release after
// it ran 35-110 µs faster when the check had started no goroutine; the
// bench's fair pair spent 15-40 % less client CPU with every pool query
// unwatched (bench/README.md). Where the pool's connections carry a
// statement's context on their socket (dialect/mysql, on a pool Open
// opened: Driver.Unwatched), the pool's queries are handed to database/sql
// under Unwatched(ctx), a context that cannot end, and the connection
// takes the caller's back (Watched) before anything else: it bounds the
// statement on its socket, or has the driver watch it as before.
// database/sql uses a query's context for two more things: the wait for a
// free connection, which a pool without a connection limit never does (so
// an unwatched context is used only on such a pool: PoolContext), and a
// new connection's set-up, which the connector runs under Watched(ctx).
// Queries in a transaction are watched by database/sql whatever their
// context (it watches the transaction's).

// unwatched is a context database/sql does not watch: it never ends, and
// keeps its caller's context for the connection to restore.
type unwatched struct{ caller context.Context }

func (unwatched) Deadline() (time.Time, bool) { return time.Time{}, false }
func (unwatched) Done() <-chan struct{}       { return nil }
func (unwatched) Err() error                  { return nil }
func (u unwatched) Value(key any) any         { return u.caller.Value(key) }

// Unwatched returns a context that never ends, for database/sql, whose
// caller's context Watched restores.
func Unwatched(ctx context.Context) context.Context { return unwatched{caller: ctx} }

// Watched returns the caller's context of an Unwatched one, or ctx itself.
func Watched(ctx context.Context) context.Context {
	if u, ok := ctx.(unwatched); ok {
		return u.caller
	}
	return ctx
}

// PoolContext is the context to hand database/sql for a query on the pool:
// Unwatched(ctx) where the pool's connections restore it and the pool has
// no connection limit (a wait for a free connection would not end with
// ctx), else ctx.
func (db *DB) PoolContext(ctx context.Context) context.Context {
	if !db.unwatched || ctx.Done() == nil || db.DB.Stats().MaxOpenConnections != 0 {
		return ctx
	}
	return Unwatched(ctx)
}

// The pool's queries, as *sqlx.DB runs them, under PoolContext(ctx). (Exec
// starts no watch: database/sql watches only rows.)

func (db *DB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return db.DB.QueryContext(db.PoolContext(ctx), query, args...)
}

func (db *DB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return db.DB.QueryRowContext(db.PoolContext(ctx), query, args...)
}

func (db *DB) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	return db.DB.QueryxContext(db.PoolContext(ctx), query, args...)
}

func (db *DB) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	return db.DB.QueryRowxContext(db.PoolContext(ctx), query, args...)
}

func (db *DB) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	return db.DB.GetContext(db.PoolContext(ctx), dest, query, args...)
}

func (db *DB) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	return db.DB.SelectContext(db.PoolContext(ctx), dest, query, args...)
}
