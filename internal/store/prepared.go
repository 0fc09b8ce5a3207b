package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// Prepared statements, for the hottest statements on MySQL and MariaDB (a
// lease's and the fair queue's: preparedSet) on a pool Open opened: the
// server parses each once per connection instead of on every call, where
// the driver otherwise sends its text with the arguments interpolated.
// The acquisition is a long upsert (the re-entry and reservation rules in
// every assignment): on MariaDB, parsing and sending it was about a third
// of an uncontended acquire+release. A pool the caller handed in is left
// alone: a handle made per request would prepare the statements once per
// handle and connection, and the server caps how many it keeps
// (max_prepared_stmt_count). A statement that cannot be prepared is sent
// as text, as before.

// preparedSet is the statements prepared on MySQL and MariaDB: a lease's
// acquisition, renewal, release and holder read, and the fair queue's
// statements on the pool.
func preparedSet(d Dialect) []string {
	l, q := d.Lease(), d.Queue()
	return []string{l.Acquire, l.AcquireReturning, l.Release, l.Renew, l.Holder,
		q.Enqueue, q.Check, q.Peek, q.Take, q.Leave, q.Heartbeat}
}

// preparedStmts holds the prepared forms of a fixed set of statements,
// each prepared on first use (not at Open: the schema may not be migrated
// yet). A statement that failed to prepare is sent as text, and prepared
// again no sooner than prepareRetry later.
type preparedStmts struct {
	pool *sqlx.DB
	mu   sync.Mutex
	m    map[string]*prepared // Absent: not one of the set.
	open bool
}

// prepared is one statement of the set: its prepared form once it has one.
type prepared struct {
	st     *sql.Stmt
	failed time.Time // The last failed preparation.
}

// prepareRetry is how long a statement that failed to prepare is sent as
// text before it is prepared again.
const prepareRetry = 10 * time.Second

// newPrepared returns the cache of queries (empty ones ignored) over pool.
func newPrepared(pool *sqlx.DB, queries ...string) *preparedStmts {
	p := &preparedStmts{pool: pool, m: map[string]*prepared{}, open: true}
	for _, q := range queries {
		if q != "" {
			p.m[q] = &prepared{}
		}
	}
	return p
}

// stmt returns the prepared form of query, preparing it now if it has none
// yet, or nil when query is not one of the set or cannot be prepared.
func (p *preparedStmts) stmt(ctx context.Context, query string) *sql.Stmt {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.m[query]
	if !p.open || e == nil {
		return nil
	}
	if e.st == nil && time.Since(e.failed) >= prepareRetry {
		st, err := p.pool.PrepareContext(ctx, query)
		if err != nil {
			e.failed = time.Now()
			return nil
		}
		e.st = st
	}
	return e.st
}

// close closes the prepared statements; later calls of stmt return nil.
func (p *preparedStmts) close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = false
	var errs []error
	for q, e := range p.m {
		if e.st != nil {
			errs = append(errs, e.st.Close())
		}
		delete(p.m, q)
	}
	return errors.Join(errs...)
}

// exec runs query on q: prepared when q is the pool and query one of the
// prepared set, else as text (queryRow decides alike for a row).
func (db *DB) exec(ctx context.Context, q Querier, query string, args ...any) (sql.Result, error) {
	if q == Querier(db.DB) {
		if st := db.prepared.stmt(ctx, query); st != nil {
			return st.ExecContext(ctx, args...)
		}
	}
	return q.ExecContext(ctx, query, args...)
}
