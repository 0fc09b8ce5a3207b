package store

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
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
// acquisition, release and holder read, a read's plain statements
// (MariaDB's SharedSQL.TakeFree, ReleaseRecorded, Join and LeaveJoined), and the fair queue's
// statements on the pool (a renewal runs in a transaction: see lockedCAS); and a
// pessimistic hold's NOWAIT lock statements, in its transaction.
func preparedSet(d Dialect) []string {
	l, q := d.Lease(), d.Queue()
	r, sh := d.Row(), d.Shared()
	return []string{l.Acquire, l.AcquireReturning, l.TakeFree, l.Release, l.Holder, sh.TakeFree, sh.ReleaseRecorded, sh.Join, sh.LeaveJoined,
		q.Enqueue, q.Check, q.Peek, q.Take, q.Leave, q.Heartbeat,
		r.LockNoWait, r.LockSharedNoWait}
}

// preparedStmts holds the prepared forms of a fixed set of statements,
// each prepared on first use (not at Open: the schema may not be migrated
// yet). A statement that failed to prepare is sent as text, and prepared
// again no sooner than prepareRetry later. Looking a statement up takes no
// lock (the set is fixed at construction); mu only orders preparations and
// close, so a statement being prepared never holds up the others.
type preparedStmts struct {
	pool   *sqlx.DB
	m      map[string]*prepared // Fixed at construction; absent: not one of the set.
	mu     sync.Mutex
	closed atomic.Bool
	// bg bounds the preparations started in the background (ready); close
	// cancels it and waits for them. bgMu guards their count (running),
	// their start against close, and idle, signalled when none runs.
	bg      context.Context
	stopBg  context.CancelFunc
	bgMu    sync.Mutex
	running int
	idle    *sync.Cond
}

// prepared is one statement of the set: its prepared form once it has one.
type prepared struct {
	st        atomic.Pointer[sql.Stmt]
	failed    atomic.Int64 // The last failed preparation, ns since the epoch (0: none).
	preparing atomic.Bool  // A background preparation is under way.
}

// retryDue reports whether a statement that failed to prepare may be
// prepared again.
func (e *prepared) retryDue() bool {
	f := e.failed.Load()
	return f == 0 || time.Since(time.Unix(0, f)) >= prepareRetry
}

// prepareRetry is how long a statement that failed to prepare is sent as
// text before it is prepared again.
const prepareRetry = 10 * time.Second

// newPrepared returns the cache of queries (empty ones ignored) over pool.
func newPrepared(pool *sqlx.DB, queries ...string) *preparedStmts {
	p := &preparedStmts{pool: pool, m: map[string]*prepared{}}
	p.bg, p.stopBg = context.WithCancel(context.Background())
	p.idle = sync.NewCond(&p.bgMu)
	for _, q := range queries {
		if q != "" {
			p.m[q] = &prepared{}
		}
	}
	return p
}

// lookup finds query's entry and its prepared form: e nil when query is not
// one of the set or the set is closed, st nil while it has none.
func (p *preparedStmts) lookup(query string) (e *prepared, st *sql.Stmt) {
	if p == nil || p.closed.Load() {
		return nil, nil
	}
	if e = p.m[query]; e != nil {
		st = e.st.Load()
	}
	return e, st
}

// stmt returns the prepared form of query, preparing it now if it has none
// yet, or nil when query is not one of the set or cannot be prepared.
func (p *preparedStmts) stmt(ctx context.Context, query string) *sql.Stmt {
	e, st := p.lookup(query)
	if e == nil || st != nil || !e.retryDue() {
		return st
	}
	return p.prepare(ctx, query, e)
}

// ready returns the prepared form of query if it has one; otherwise nil,
// and the statement is prepared in the background (when it is one of the
// set and due). For statements run inside a transaction (txQueryRow): a
// preparation there would wait for a second connection of the pool while
// the transaction holds one.
func (p *preparedStmts) ready(query string) *sql.Stmt {
	e, st := p.lookup(query)
	if e != nil && st == nil {
		p.prepareLater(query, e)
	}
	return st
}

// prepareLater prepares query for e on a goroutine of its own, unless one
// is under way, it failed too recently, or the set was closed.
func (p *preparedStmts) prepareLater(query string, e *prepared) {
	if !e.retryDue() || !e.preparing.CompareAndSwap(false, true) {
		return
	}
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	if p.closed.Load() {
		return
	}
	p.running++
	go func() {
		defer p.doneLater(e)
		ctx, cancel := context.WithTimeout(p.bg, prepareRetry)
		defer cancel()
		p.prepare(ctx, query, e)
	}()
}

// doneLater ends a background preparation of e.
func (p *preparedStmts) doneLater(e *prepared) {
	e.preparing.Store(false)
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	if p.running--; p.running == 0 {
		p.idle.Broadcast()
	}
}

// waitIdle returns when no background preparation runs: none holds a
// connection of the pool then.
func (p *preparedStmts) waitIdle() {
	if p == nil {
		return
	}
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	for p.running > 0 {
		p.idle.Wait()
	}
}

// WaitPreparing returns when no statement is being prepared in the
// background on db's pool (see prepared.go): a Locker's Close calls it, so
// that no connection is in use for a preparation its holds started.
func (db *DB) WaitPreparing() { db.prepared.waitIdle() }

// prepare prepares query for e, unless another caller did meanwhile, it
// failed too recently, or the set was closed.
func (p *preparedStmts) prepare(ctx context.Context, query string, e *prepared) *sql.Stmt {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := e.st.Load(); st != nil || p.closed.Load() || !e.retryDue() {
		return st
	}
	st, err := p.pool.PrepareContext(ctx, query)
	if err != nil {
		e.failed.Store(time.Now().UnixNano())
		return nil
	}
	e.st.Store(st)
	return st
}

// close closes the prepared statements; later calls of stmt return nil.
func (p *preparedStmts) close() error {
	if p == nil {
		return nil
	}
	p.bgMu.Lock()
	p.closed.Store(true)
	p.bgMu.Unlock()
	p.stopBg()
	p.waitIdle()
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, e := range p.m {
		if st := e.st.Swap(nil); st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// txQueryRow scans the first row of query in tx into dest: prepared (on
// tx's connection, once per connection) when tx is a transaction and
// query one of the prepared set, else as text. Errors are unclassified.
func (db *DB) txQueryRow(ctx context.Context, tx Querier, query string, args []any, dest ...any) error {
	if t, ok := tx.(*sqlx.Tx); ok {
		if st := db.prepared.ready(query); st != nil {
			ts := t.StmtContext(ctx, st)
			defer ts.Close()
			return ts.QueryRowContext(ctx, args...).Scan(dest...)
		}
	}
	return tx.QueryRowxContext(ctx, query, args...).Scan(dest...)
}

// exec runs query on q: prepared when q is the pool and query one of the
// prepared set, else as text (queryRow decides alike for a row).
func (db *DB) exec(ctx context.Context, q Querier, query string, args ...any) (sql.Result, error) {
	if db.onPool(q) {
		if st := db.prepared.stmt(ctx, query); st != nil {
			return st.ExecContext(ctx, args...)
		}
	}
	return q.ExecContext(ctx, query, args...)
}
