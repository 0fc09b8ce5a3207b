package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"

	"github.com/dblock-go/dblock/internal/store"
)

// checkedConnector opens the driver's connections wrapped so that a
// transaction begun with a context from store.WithCheckedCommit commits
// with store.MariaDBCheckedCommit: the COMMIT of a pessimistic hold checks
// in the same round trip that the server still has the transaction open,
// unless the connection saw that it is (proven.go). Every other statement
// and transaction goes to the driver as it came.
//
// Where open dials itself (dialRecorded), each connection also keeps its
// socket, so that a statement in flight can be ended from another goroutine
// (Interrupt), and a statement's context (its deadline, its cancellation)
// is carried by the socket instead of the driver's watcher (deadline.go).
//
// dblock hands database/sql its queries on the pool under a context that
// cannot end (store.Unwatched), so that database/sql does not start a
// goroutine to watch their rows: Connect, and every method of a connection
// or statement that takes a context, first restore the caller's
// (store.Watched), then carry it on the socket or hand it to the driver.
type checkedConnector struct {
	driver.Connector
	// interpolate: the driver sends statements with arguments as text
	// (its InterpolateParams), so a hold's BEGIN may be deferred (see
	// lazybegin.go).
	interpolate bool
	// ownDeadlines: the driver sets no socket deadlines of its own (no
	// readTimeout or writeTimeout), so a statement's may be set there
	// (deadline.go).
	ownDeadlines bool
}

func (c checkedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	ctx = store.Watched(ctx)
	slot := &netSlot{}
	conn, err := c.Connector.Connect(context.WithValue(ctx, netSlotKey{}, slot))
	if err != nil {
		return nil, err
	}
	return &checkedConn{conn: conn, net: slot.conn, interpolate: c.interpolate,
		deadlines: slot.conn != nil && c.ownDeadlines}, nil
}

// netSlot receives the socket dialRecorded dials for one Connect.
type netSlot struct{ conn net.Conn }

type netSlotKey struct{}

// dialRecorded dials as the driver does by default (its connector then
// turns TCP keepalives on) and hands the socket to the Connect under way.
func dialRecorded(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if slot, ok := ctx.Value(netSlotKey{}).(*netSlot); ok && err == nil {
		slot.conn = conn
	}
	return conn, err
}

// checkedConn forwards every interface of the driver's connection
// (database/sql asks for each), and wraps checked transactions, prepared
// statements and the rows it must know of.
type checkedConn struct {
	conn driver.Conn
	net  net.Conn // The socket, where dialRecorded dialed it.
	// deadlines: a statement's context may be carried by the socket
	// (deadline.go).
	deadlines bool
	// noProc: the schema lacks the checked commit's procedure (it predates
	// MySQL migration 00018) or the account may not execute it; this
	// connection sends the block instead.
	noProc bool
	// interpolate, noLockProc and tx: a hold's deferred BEGIN (see
	// lazybegin.go).
	interpolate bool
	noLockProc  bool
	tx          *checkedTx
}

// errNoInterface is returned if the driver's connection lacks an interface
// it always had; database/sql then falls back where it can.
var errNoInterface = errors.New("dblock: the mysql driver's connection lacks an expected interface")

// Interrupt makes the statement under way on the connection fail at once,
// and every later one: it closes the socket (store.Interrupter).
func (c *checkedConn) Interrupt() {
	if c.net != nil {
		_ = c.net.Close()
	}
}

// Interruptible reports whether Interrupt can end a statement.
func (c *checkedConn) Interruptible() bool { return c.net != nil }

func (c *checkedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}
func (c *checkedConn) Close() error { return c.conn.Close() }

// Begin is the deprecated form; database/sql calls BeginTx.
func (c *checkedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *checkedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	ctx = store.Watched(ctx)
	b, ok := c.conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errNoInterface
	}
	if !store.CheckedCommit(ctx) {
		return b.BeginTx(ctx, opts)
	}
	if c.defers(ctx, opts) {
		c.tx = &checkedTx{conn: c, pending: true}
		return c.tx, nil
	}
	// A hold's transaction context is cancelled only to end a hold that
	// was lost or whose end overran its bound (pessimistic's txCancel),
	// never while its BEGIN is under way: the driver need not watch it,
	// which would hand ctx to its watcher goroutine and back (a wake-up
	// of another thread on every hold). database/sql watches ctx itself.
	tx, err := b.BeginTx(context.WithoutCancel(ctx), opts)
	if err != nil {
		return nil, err
	}
	c.tx = &checkedTx{Tx: tx, conn: c}
	return c.tx, nil
}

func (c *checkedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	ctx = store.Watched(ctx)
	if err := c.begun(ctx); err != nil {
		return nil, err
	}
	var st driver.Stmt
	var err error
	if p, ok := c.conn.(driver.ConnPrepareContext); ok {
		st, err = p.PrepareContext(ctx, query)
	} else {
		st, err = c.conn.Prepare(query)
	}
	c.observe(query, err)
	if err != nil {
		return nil, err
	}
	return &boundedStmt{Stmt: st, conn: c, query: query}, nil
}

func (c *checkedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ctx = store.Watched(ctx)
	if err := c.begun(ctx); err != nil {
		return nil, err
	}
	e, ok := c.conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	res, err := c.boundedExec(ctx, func(ctx context.Context) (driver.Result, error) { return e.ExecContext(ctx, query, args) })
	c.observe(query, err)
	return res, err
}

func (c *checkedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	ctx = store.Watched(ctx)
	if query == store.MariaDBLockBegin {
		return c.lockBegin(ctx, args)
	}
	if err := c.begun(ctx); err != nil {
		return nil, err
	}
	q, ok := c.conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	rows, err := c.boundedQuery(ctx, func(ctx context.Context) (driver.Rows, error) { return q.QueryContext(ctx, query, args) })
	c.observe(query, err)
	return rows, err
}

func (c *checkedConn) Ping(ctx context.Context) error {
	ctx = store.Watched(ctx)
	if p, ok := c.conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c *checkedConn) ResetSession(ctx context.Context) error {
	ctx = store.Watched(ctx)
	if r, ok := c.conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *checkedConn) IsValid() bool {
	if v, ok := c.conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *checkedConn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// checkedTx commits with the check. Its rollback is the driver's, or a
// ROLLBACK of its own for a transaction whose BEGIN was deferred (Tx nil).
type checkedTx struct {
	driver.Tx // The driver's; nil when the BEGIN was deferred.
	conn      *checkedConn
	// pending: the deferred BEGIN is still to be sent (nothing was sent);
	// failed: sending it failed, and the transaction never began.
	pending bool
	failed  error
	// unproven: a statement of the transaction may have ended it (it failed,
	// or it was not a plain data statement), so its commit is the checked
	// one (proven.go).
	unproven bool
}

// Commit sends a plain COMMIT where the connection saw that the transaction
// is open (proven.go); else it calls the checked commit's procedure, or
// sends its block where the procedure is missing (error 1305) or the
// account may not execute it (1370: grants written before MySQL migration
// 00018); either refusal leaves the transaction open. A transaction that
// never began on the server commits nothing.
func (t *checkedTx) Commit() error {
	defer t.conn.ended(t)
	if t.pending {
		return nil
	}
	if t.failed != nil {
		return t.failed
	}
	ctx := context.Background()
	if !t.unproven {
		return t.conn.exec(ctx, "COMMIT")
	}
	if !t.conn.noProc {
		_, err := t.conn.ExecContext(ctx, store.MariaDBCheckedCommitCall, nil)
		if !store.ProcedureRefused(err) {
			return err
		}
		t.conn.noProc = true
	}
	_, err := t.conn.ExecContext(ctx, store.MariaDBCheckedCommit, nil)
	return err
}

// Rollback is the driver's, or for a deferred BEGIN a ROLLBACK once it was
// sent (nothing before).
func (t *checkedTx) Rollback() error {
	defer t.conn.ended(t)
	switch {
	case t.Tx != nil:
		return t.Tx.Rollback()
	case t.pending || t.failed != nil:
		return nil
	}
	_, err := t.conn.ExecContext(context.Background(), "ROLLBACK", nil)
	return err
}
