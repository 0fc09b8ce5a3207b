package mysql

import (
	"context"
	"database/sql/driver"

	"github.com/dblock-go/dblock/internal/store"
)

// A MariaDB pessimistic hold's deferred BEGIN. A transaction begun with a
// context from both store.WithCheckedCommit and store.WithDeferredBegin
// sends nothing at BeginTx: the hold's first statement is its lock, which
// the store sends as store.MariaDBLockBegin (MySQL migration 00026's
// dblock_lock_begin, which begins the transaction and locks the row in one
// call) while the BEGIN is pending (else it answers store.ErrBegun,
// sending nothing). Any other first statement has START
// TRANSACTION sent before it, and so does the lock where the procedure is
// refused (missing, or not executable by the account): the BEGIN is then
// no longer deferred on this connection. A transaction that ends before
// any statement sends nothing at all.
//
// Only where the driver sends statements with arguments as text
// (InterpolateParams, which open sets unless the DSN says otherwise): a
// statement it prepared first would run before the BEGIN. For the same
// reason the hold's first statement must come through this connection's
// Exec, Query or Prepare: one that database/sql had prepared on the
// connection earlier would run through the driver's statement directly,
// outside the transaction. A hold's first statement is always its lock
// (LockRow, or LockRows as text), and is never such a one.

// defers reports whether a checked transaction begun with ctx and opts
// defers its BEGIN.
func (c *checkedConn) defers(ctx context.Context, opts driver.TxOptions) bool {
	return store.DeferredBegin(ctx) && c.interpolate && !c.noLockProc &&
		opts.Isolation == driver.IsolationLevel(0) && !opts.ReadOnly
}

// begun sends a deferred BEGIN on its own, before a statement that cannot
// carry it. After a failed BEGIN every statement of the transaction fails:
// none may run outside it.
func (c *checkedConn) begun(ctx context.Context) error {
	if c.tx == nil {
		return nil
	}
	if c.tx.pending {
		c.tx.pending = false
		if err := c.exec(ctx, "START TRANSACTION"); err != nil {
			c.tx.failed = err
		}
	}
	return c.tx.failed
}

// lockBegin sends the hold's lock with its BEGIN (store.MariaDBLockBegin)
// while the BEGIN is pending, and answers store.ErrBegun otherwise. Whatever
// the call answers, the transaction has begun on the server after it (a
// refused lock leaves it open), unless the procedure itself was refused:
// then START TRANSACTION is sent at once, and the error returned for the
// store to send its plain lock statement.
func (c *checkedConn) lockBegin(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if c.tx == nil || !c.tx.pending {
		return nil, store.ErrBegun
	}
	q, ok := c.conn.(driver.QueryerContext)
	if !ok {
		return nil, errNoInterface
	}
	rows, err := q.QueryContext(ctx, store.MariaDBLockBegin, args)
	if !store.ProcedureRefused(err) {
		c.tx.pending = false
		return rows, err
	}
	c.noLockProc = true
	if berr := c.begun(ctx); berr != nil {
		return nil, berr
	}
	return nil, err
}

// exec runs query on the driver's connection.
func (c *checkedConn) exec(ctx context.Context, query string) error {
	e, ok := c.conn.(driver.ExecerContext)
	if !ok {
		return errNoInterface
	}
	_, err := e.ExecContext(ctx, query, nil)
	return err
}

// ended forgets t, the connection's transaction, as it ends.
func (c *checkedConn) ended(t *checkedTx) {
	if c.tx == t {
		c.tx = nil
	}
}
