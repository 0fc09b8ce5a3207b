package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"

	"github.com/go-sql-driver/mysql"

	"github.com/dblock-go/dblock/internal/store"
)

// Statement deadlines on the socket. The driver watches a statement's
// context when it can end: it hands the context to the connection's
// watcher goroutine before the statement and takes it back after, two
// wake-ups of another goroutine per statement. On a connection whose
// socket dialRecorded kept, and where the driver sets no deadlines of its
// own (no readTimeout or writeTimeout in the DSN), a statement's context
// is carried by the socket instead (store.ArmDeadline): its deadline set
// on it, its cancellation expiring it at once, and the statement run
// under a context the driver does not watch. When the context ends, the
// socket's read or write fails, the driver closes the connection, as after
// its own cancellation, and the statement fails with the context's error.
// The socket's deadline is cleared as an Exec returns and as a query's
// rows are closed (they are read after the call), so nothing later on the
// connection (a transaction's COMMIT, which the driver sends itself)
// meets it.

// arm carries ctx on the socket where it can (see above): run is the
// context to run the statement under; an armed statement is disarmed
// once done.
func (c *checkedConn) arm(ctx context.Context) (run context.Context, a store.Armed, err error) {
	if !c.deadlines {
		return ctx, store.Armed{}, nil
	}
	return store.ArmDeadline(ctx, c.net)
}

// overran reports a statement's error once its context ended as the
// context's (store.Ended): the driver closed the connection when the
// socket's read or write failed.
func overran(ctx context.Context, a store.Armed, err error) error {
	if err == nil || err == io.EOF || !connGone(err) || !a.Ended() {
		return err
	}
	return store.Ended(ctx, err)
}

// connGone reports whether err is the driver's answer to a failed read or
// write on the socket.
func connGone(err error) bool {
	return errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn)
}

// boundedExec runs exec under ctx, bounded by the socket's deadline where
// ctx allows it.
func (c *checkedConn) boundedExec(ctx context.Context, exec func(context.Context) (driver.Result, error)) (driver.Result, error) {
	run, a, err := c.arm(ctx)
	if err != nil {
		return nil, err
	}
	if !a.Armed() {
		return exec(run)
	}
	res, err := exec(run)
	a.Disarm(c.net)
	return res, overran(ctx, a, err)
}

// boundedQuery runs query under ctx, bounded by the socket's deadline
// where ctx allows it, until its rows are closed. Rows read in a checked
// transaction report their errors to it (proven.go).
func (c *checkedConn) boundedQuery(ctx context.Context, query func(context.Context) (driver.Rows, error)) (driver.Rows, error) {
	run, a, err := c.arm(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := query(run)
	if err != nil {
		a.Disarm(c.net)
		return nil, overran(ctx, a, err)
	}
	tx := c.watched()
	if !a.Armed() && tx == nil {
		return rows, nil
	}
	return &connRows{Rows: rows, conn: c, ctx: ctx, armed: a, tx: tx}, nil
}
