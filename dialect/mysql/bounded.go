package mysql

import (
	"context"
	"database/sql/driver"
	"io"
	"reflect"

	"github.com/dblock-go/dblock/internal/store"
)

// boundedStmt is a prepared statement of a checkedConn, its context
// carried by the socket where it can be (deadline.go), and
// observed by the connection's checked transaction (proven.go).
type boundedStmt struct {
	driver.Stmt
	conn  *checkedConn
	query string
}

func (s *boundedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	ctx = store.Watched(ctx)
	e, ok := s.Stmt.(driver.StmtExecContext)
	if !ok {
		return nil, errNoInterface
	}
	res, err := s.conn.boundedExec(ctx, func(ctx context.Context) (driver.Result, error) { return e.ExecContext(ctx, args) })
	s.conn.observe(s.query, err)
	return res, err
}

func (s *boundedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	ctx = store.Watched(ctx)
	q, ok := s.Stmt.(driver.StmtQueryContext)
	if !ok {
		return nil, errNoInterface
	}
	rows, err := s.conn.boundedQuery(ctx, func(ctx context.Context) (driver.Rows, error) { return q.QueryContext(ctx, args) })
	s.conn.observe(s.query, err)
	return rows, err
}

func (s *boundedStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// connRows are a query's rows where the connection must know of them:
// closing bounded rows (armed) ends their statement's hold on the socket,
// and a read that fails once the context ended fails with its error; rows of a checked
// transaction (tx) report a failed read to it. The column-type interfaces
// are forwarded (the driver's rows have them all).
type connRows struct {
	driver.Rows
	conn  *checkedConn
	ctx   context.Context
	armed store.Armed
	tx    *checkedTx
}

func (r *connRows) Close() error {
	err := r.Rows.Close()
	r.armed.Disarm(r.conn.net)
	return r.failed(err)
}

func (r *connRows) Next(dest []driver.Value) error {
	return r.failed(r.Rows.Next(dest))
}

// failed maps a read's error (see connRows).
func (r *connRows) failed(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if r.tx != nil {
		r.tx.unproven = true
	}
	return overran(r.ctx, r.armed, err)
}

func (r *connRows) HasNextResultSet() bool {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	return ok && n.HasNextResultSet()
}

func (r *connRows) NextResultSet() error {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return r.failed(n.NextResultSet())
	}
	return io.EOF
}

func (r *connRows) ColumnTypeScanType(i int) reflect.Type {
	if c, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return c.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *connRows) ColumnTypeDatabaseTypeName(i int) string {
	if c, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return c.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *connRows) ColumnTypeLength(i int) (int64, bool) {
	if c, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return c.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *connRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if c, is := r.Rows.(driver.RowsColumnTypeNullable); is {
		return c.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *connRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if c, is := r.Rows.(driver.RowsColumnTypePrecisionScale); is {
		return c.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}
