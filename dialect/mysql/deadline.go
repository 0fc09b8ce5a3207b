package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
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
// writeTimeout in the DSN), such a statement has the deadline set on the
// socket instead and runs under the context without it, which the driver
// does not watch. Past the deadline the socket's read or write fails, the
// driver closes the connection, as after a cancellation, and the
// statement fails with context.DeadlineExceeded. The deadline is cleared
// as an Exec returns and as a query's rows are closed (they are read after
// the call), so nothing later on the connection (a transaction's COMMIT,
// which the driver sends itself) meets it.

// arm sets ctx's deadline on the socket where it can (see above and
// store.ArmDeadline): run is the context to run the statement under, and
// armed says whether the deadline was set (then call disarm once the
// statement is done).
func (c *checkedConn) arm(ctx context.Context) (run context.Context, deadline time.Time, armed bool, err error) {
	if !c.deadlines {
		return ctx, time.Time{}, false, nil
	}
	return store.ArmDeadline(ctx, c.net)
}

// disarm clears the socket's deadline.
func (c *checkedConn) disarm() { _ = c.net.SetDeadline(time.Time{}) }

// overran reports a statement's error past its deadline as the deadline's
// (store.DeadlinePassed): the driver closed the connection when the
// socket's read or write failed.
func overran(ctx context.Context, deadline time.Time, err error) error {
	if err == nil || err == io.EOF || time.Now().Before(deadline) || !connGone(err) {
		return err
	}
	return store.DeadlinePassed(ctx, err)
}

// connGone reports whether err is the driver's answer to a failed read or
// write on the socket.
func connGone(err error) bool {
	return errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn)
}

// boundedExec runs exec under ctx, bounded by the socket's deadline where
// ctx allows it.
func (c *checkedConn) boundedExec(ctx context.Context, exec func(context.Context) (driver.Result, error)) (driver.Result, error) {
	run, deadline, armed, err := c.arm(ctx)
	if err != nil {
		return nil, err
	}
	if !armed {
		return exec(run)
	}
	res, err := exec(run)
	c.disarm()
	return res, overran(ctx, deadline, err)
}

// boundedQuery runs query under ctx, bounded by the socket's deadline
// where ctx allows it, until its rows are closed. Rows read in a checked
// transaction report their errors to it (proven.go).
func (c *checkedConn) boundedQuery(ctx context.Context, query func(context.Context) (driver.Rows, error)) (driver.Rows, error) {
	run, deadline, armed, err := c.arm(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := query(run)
	if err != nil {
		if armed {
			c.disarm()
			err = overran(ctx, deadline, err)
		}
		return nil, err
	}
	tx := c.watched()
	if !armed && tx == nil {
		return rows, nil
	}
	return &connRows{Rows: rows, conn: c, ctx: ctx, deadline: deadline, armed: armed, tx: tx}, nil
}
