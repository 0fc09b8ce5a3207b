package mysql

import (
	"context"
	"database/sql/driver"
	"io"
	"reflect"
	"time"
)

// boundedStmt is a prepared statement of a checkedConn, bounded by the
// socket's deadline where its context allows it (deadline.go).
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
	return s.conn.boundedQuery(ctx, func(ctx context.Context) (driver.Rows, error) { return q.QueryContext(ctx, args) })
}

func (s *boundedStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// boundedRows are a bounded query's rows: closing them clears the socket's
// deadline, and a read that fails past it fails with the deadline. The
// column-type interfaces are forwarded (the driver's rows have them all).
type boundedRows struct {
	driver.Rows
	conn     *checkedConn
	ctx      context.Context
	deadline time.Time
}

func (r *boundedRows) Close() error {
	err := r.Rows.Close()
	r.conn.disarm()
	return err
}

func (r *boundedRows) Next(dest []driver.Value) error {
	return overran(r.ctx, r.deadline, r.Rows.Next(dest))
}

func (r *boundedRows) HasNextResultSet() bool {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	return ok && n.HasNextResultSet()
}

func (r *boundedRows) NextResultSet() error {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return overran(r.ctx, r.deadline, n.NextResultSet())
	}
	return io.EOF
}

func (r *boundedRows) ColumnTypeScanType(i int) reflect.Type {
	if c, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return c.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *boundedRows) ColumnTypeDatabaseTypeName(i int) string {
	if c, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return c.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *boundedRows) ColumnTypeLength(i int) (int64, bool) {
	if c, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return c.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *boundedRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if c, is := r.Rows.(driver.RowsColumnTypeNullable); is {
		return c.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *boundedRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if c, is := r.Rows.(driver.RowsColumnTypePrecisionScale); is {
		return c.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}
