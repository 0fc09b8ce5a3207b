package postgres

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dblock-go/dblock/internal/store"
)

// lazyConnector (the pools open opens, and FromPool's) opens pgx's
// connections wrapped so that a transaction begun
// with a context from store.WithDeferredBegin sends its BEGIN with its first
// statement: in the same round trip when that statement goes through
// queryRowOn or execOn (a pessimistic hold's lock statement, see
// store.DB.DefersBegin), and just before it otherwise. Every other
// transaction and statement goes to pgx unchanged.
type lazyConnector struct{ driver.Connector }

func (c lazyConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := conn.(*stdlib.Conn)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("dblock: pgx's connector returned a connection of another type")
	}
	return &lazyConn{stdConn: sc}, nil
}

// stdConn is pgx's stdlib connection under a name of its own, so that the
// embedding field is not called Conn and stdlib.Conn's method Conn (pgx's
// connection) is promoted to lazyConn.
type stdConn = stdlib.Conn

// lazyConn is pgx's connection (every interface database/sql asks for is
// its, by embedding, and its method Conn) with the transaction begun lazily
// on it, if any.
type lazyConn struct {
	*stdConn
	tx *lazyTx // Until the transaction's end.
}

// lazyTx is a transaction whose BEGIN was deferred: pending until its first
// statement, then pgx's own transaction.
type lazyTx struct {
	c   *lazyConn
	ctx context.Context // BeginTx's: the transaction's end runs under it, as pgx's stdlib does.
	tx  pgx.Tx          // nil while pending
	err error           // sending BEGIN failed: the transaction never began
}

func (c *lazyConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *lazyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if !store.DeferredBegin(ctx) || opts.Isolation != driver.IsolationLevel(0) || opts.ReadOnly {
		return c.stdConn.BeginTx(ctx, opts)
	}
	if c.stdConn.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	c.tx = &lazyTx{c: c, ctx: ctx}
	return c.tx, nil
}

// pending reports whether a deferred BEGIN is still to be sent.
func (c *lazyConn) pending() bool { return c.tx != nil && c.tx.tx == nil && c.tx.err == nil }

// begun sends a deferred BEGIN on its own, before a statement that cannot
// carry it. After a failed BEGIN every statement of the transaction fails:
// none may run outside it.
func (c *lazyConn) begun() error {
	if c.tx == nil {
		return nil
	}
	if c.pending() {
		c.tx.tx, c.tx.err = c.stdConn.Conn().BeginTx(c.tx.ctx, pgx.TxOptions{})
	}
	return c.tx.err
}

// beginWith runs query as the transaction's first statement, with the
// deferred BEGIN in the same round trip, scanning its first row into dest
// (dest nil: an Exec, returning the rows it affected).
func (c *lazyConn) beginWith(ctx context.Context, query string, args, dest []any) (int64, error) {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	begun := false
	b.QueuedQueries[0].Exec(func(pgconn.CommandTag) error { begun = true; return nil })
	var affected int64
	q := b.Queue(query, args...)
	if dest != nil {
		q.QueryRow(func(row pgx.Row) error { return row.Scan(dest...) })
	} else {
		q.Exec(func(tag pgconn.CommandTag) error { affected = tag.RowsAffected(); return nil })
	}
	br := c.stdConn.Conn().SendBatch(ctx, b)
	tx := br.Tx()
	err := br.Close()
	if !begun {
		// BEGIN failed, or nothing was sent: no transaction. Not
		// driver.ErrBadConn, even where nothing was sent: the caller runs
		// this inside database/sql's Conn.Raw, which would close the Conn
		// and wait there for the transaction it holds to end.
		if err == nil {
			err = errors.New("dblock: the transaction did not begin")
		}
		c.tx.err = err
		return 0, err
	}
	c.tx.tx = tx
	return affected, err
}

func (c *lazyConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *lazyConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.begun(); err != nil {
		return nil, err
	}
	return c.stdConn.PrepareContext(ctx, query)
}

func (c *lazyConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.begun(); err != nil {
		return nil, err
	}
	return c.stdConn.ExecContext(ctx, query, args)
}

func (c *lazyConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.begun(); err != nil {
		return nil, err
	}
	return c.stdConn.QueryContext(ctx, query, args)
}

// Commit and Rollback end pgx's transaction under BeginTx's context, or
// end nothing when no statement ran.
func (t *lazyTx) Commit() error {
	t.c.tx = nil
	switch {
	case t.err != nil:
		return t.err
	case t.tx == nil:
		return nil
	}
	return t.tx.Commit(t.ctx)
}

func (t *lazyTx) Rollback() error {
	t.c.tx = nil
	if t.tx == nil {
		return nil
	}
	return t.tx.Rollback(t.ctx)
}

// stdlibConn returns pgx's connection under dc, a connection of a pool
// open or FromPool opened, sending a deferred BEGIN first.
func stdlibConn(dc any) (*stdlib.Conn, error) {
	switch c := dc.(type) {
	case *lazyConn:
		return c.stdConn, c.begun()
	case *stdlib.Conn:
		return c, nil
	}
	return nil, errors.New("dblock: not a pgx connection")
}
