package store

import (
	"context"
	"fmt"
	"net"
	"time"
)

// A statement bounded on its connection's socket. A driver's own path
// (PostgreSQL's pgx, the MariaDB connections dialect/mysql wraps) runs a
// statement whose context StatementContext made deadline-only with that
// deadline set on the socket, under a context it need not watch: a watch
// costs the drivers a goroutine hand-off per statement.

// ArmDeadline prepares a statement under ctx on the connection whose
// socket is nc. Where ctx's only end is its deadline (DeadlineOnly), the
// deadline is set on nc and run is the context without it (armed: clear
// nc's deadline once the statement is done, and report a failure past it
// with DeadlinePassed). A deadline already past fails at once, once ctx
// has ended, with nothing sent. Any other ctx, or a deadline nc refuses,
// runs as it is.
func ArmDeadline(ctx context.Context, nc net.Conn) (run context.Context, deadline time.Time, armed bool, err error) {
	deadline, bare, ok := DeadlineOnly(ctx)
	if !ok {
		return ctx, time.Time{}, false, nil
	}
	if !time.Now().Before(deadline) {
		<-ctx.Done()
		return nil, deadline, false, ctx.Err()
	}
	if nc.SetDeadline(deadline) != nil {
		return ctx, time.Time{}, false, nil
	}
	return bare, deadline, true, nil
}

// DeadlinePassed is the error of a statement that failed on its socket
// because ctx's deadline passed: it returns once ctx has ended too (a
// caller that asks ctx whether the statement timed out hears so; the
// socket's deadline can pass a moment before ctx's timer fires), as
// context.DeadlineExceeded with err's text. err itself is not wrapped: a
// driver's error may say that nothing was sent, and have the statement
// tried again on another connection, past its deadline.
func DeadlinePassed(ctx context.Context, err error) error {
	<-ctx.Done()
	return fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
}
