package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dblock-go/dblock/internal/store"
)

// Statement deadlines on the socket. The driver watches a statement's
// context when it can be cancelled: it hands the context to the
// connection's watcher goroutine before the statement and takes it back
// after, two wake-ups of another goroutine per statement. dblock's lease
// statements run under a context whose only end is its deadline
// (store.DeadlineOnly); on a connection whose socket dialRecorded kept,
// and where the driver sets no deadlines of its own (no readTimeout or
// writeTimeout in the DSN), an Exec under such a context has the deadline
// set on the socket instead and runs under the context without it, which
// the driver does not watch. Past the deadline the socket's read or write
// fails, the driver closes the connection, as after a cancellation, and
// the statement fails with context.DeadlineExceeded. The deadline is
// cleared as the Exec returns, so nothing later on the connection (a
// transaction's COMMIT, which the driver sends itself) meets it. Queries
// keep the driver's watch: their rows are read after the call returns.

// boundedExec runs exec under ctx, bounded by the socket's deadline where
// ctx allows it (see above).
func (c *checkedConn) boundedExec(ctx context.Context, exec func(context.Context) (driver.Result, error)) (driver.Result, error) {
	if !c.deadlines {
		return exec(ctx)
	}
	deadline, bare, ok := store.DeadlineOnly(ctx)
	if !ok {
		return exec(ctx)
	}
	if !time.Now().Before(deadline) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := c.net.SetDeadline(deadline); err != nil {
		return exec(ctx)
	}
	res, err := exec(bare)
	_ = c.net.SetDeadline(time.Time{})
	if err != nil && !time.Now().Before(deadline) && connGone(err) {
		// The connection is closed: the driver's ErrBadConn would have
		// database/sql try again on another one, past the deadline.
		<-ctx.Done()
		return nil, fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	}
	return res, err
}

// connGone reports whether err is the driver's answer to a failed read or
// write on the socket.
func connGone(err error) bool {
	return errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn)
}

// boundedStmt is a prepared statement of a checkedConn whose Exec is
// bounded by the socket's deadline where its context allows it.
type boundedStmt struct {
	driver.Stmt
	conn *checkedConn
}

func (s *boundedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	e, ok := s.Stmt.(driver.StmtExecContext)
	if !ok {
		return nil, errNoInterface
	}
	return s.conn.boundedExec(ctx, func(ctx context.Context) (driver.Result, error) { return e.ExecContext(ctx, args) })
}

func (s *boundedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := s.Stmt.(driver.StmtQueryContext)
	if !ok {
		return nil, errNoInterface
	}
	return q.QueryContext(ctx, args)
}

func (s *boundedStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (s *boundedStmt) ColumnConverter(idx int) driver.ValueConverter {
	if cc, ok := s.Stmt.(driver.ColumnConverter); ok { //nolint:staticcheck // forwarded as the driver has it
		return cc.ColumnConverter(idx)
	}
	return driver.DefaultParameterConverter
}
