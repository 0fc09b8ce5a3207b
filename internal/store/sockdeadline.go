package store

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// A statement bounded on its connection's socket. A driver's own path
// (PostgreSQL's pgx, the MariaDB connections dialect/mysql wraps) runs a
// statement with its context's end carried by the socket, under a context
// it need not watch: a watch costs the drivers a goroutine hand-off per
// statement (go-sql-driver hands the context to the connection's watcher
// goroutine before the statement and takes it back after; pgx watches it
// with context.AfterFunc and a goroutine of its own).
//
//   - A context whose only end is its deadline (DeadlineOnly, from
//     StatementContext) has that deadline set on the socket.
//   - A context that can be cancelled (a caller's, as Lease.Release(ctx)
//     passes it on) has its deadline, if any, set on the socket, and its
//     cancellation expires the socket at once (context.AfterFunc, which
//     registers with the context and starts no goroutine).
//
// Either way the statement runs under a context that is never cancelled,
// so the driver does not watch it. When the context ends during the
// statement, the socket's read or write fails, the driver closes the
// connection (as after its own cancellation), and the statement fails with
// the context's error (Ended).

// Armed is a statement armed on its socket by ArmDeadline; the zero value
// is a statement that was not (it runs under its context, as it is).
type Armed struct {
	deadline time.Time    // The socket's deadline (zero: none set).
	watch    *cancelWatch // The cancellation's watch, for a cancellable context.
}

// cancelWatch expires a socket when its statement's context ends, unless
// the statement is done (then the socket's deadline is left to Disarm).
type cancelWatch struct {
	nc    net.Conn
	stop  func() bool
	mu    sync.Mutex
	done  bool // Disarm ran: the socket is no longer the statement's.
	fired bool // The context ended while the statement ran.
}

// expire runs when the context ends (context.AfterFunc).
func (w *cancelWatch) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.fired = true
		_ = w.nc.SetDeadline(time.Unix(1, 0))
	}
}

// ArmDeadline prepares a statement under ctx on the connection whose
// socket is nc (see above): run is the context to run it under, and a
// armed statement needs Disarm once done. A context that has already
// ended fails at once, with nothing sent (a deadline already past, once
// ctx has ended). A context that can neither end nor be cancelled, or a
// deadline nc refuses, runs as it is.
func ArmDeadline(ctx context.Context, nc net.Conn) (run context.Context, a Armed, err error) {
	if deadline, bare, ok := DeadlineOnly(ctx); ok {
		if !time.Now().Before(deadline) {
			<-ctx.Done()
			return nil, Armed{}, ctx.Err()
		}
		if nc.SetDeadline(deadline) != nil {
			return ctx, Armed{}, nil
		}
		return bare, Armed{deadline: deadline}, nil
	}
	if ctx.Done() == nil {
		return ctx, Armed{}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, Armed{}, err
	}
	deadline, _ := ctx.Deadline()
	if nc.SetDeadline(deadline) != nil {
		return ctx, Armed{}, nil
	}
	w := &cancelWatch{nc: nc}
	w.stop = context.AfterFunc(ctx, w.expire)
	return context.WithoutCancel(ctx), Armed{deadline: deadline, watch: w}, nil
}

// Armed reports whether the statement was armed (Disarm it once done): a
// deadline-only context always has a deadline, a cancellable one a watch.
func (a Armed) Armed() bool { return a.watch != nil || !a.deadline.IsZero() }

// Disarm ends the statement's hold on the socket: the cancellation no
// longer expires it, and its deadline is cleared (nothing later on the
// connection meets it: a transaction's COMMIT, sent by the driver itself).
func (a Armed) Disarm(nc net.Conn) {
	if !a.Armed() {
		return
	}
	if w := a.watch; w != nil {
		w.stop()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	}
	_ = nc.SetDeadline(time.Time{})
}

// Ended reports whether a statement that failed on its socket failed
// because its context ended: its deadline had passed, or its cancellation
// expired the socket. Call it after Disarm.
func (a Armed) Ended() bool {
	if a.watch != nil {
		a.watch.mu.Lock()
		defer a.watch.mu.Unlock()
		if a.watch.fired {
			return true
		}
	}
	return !a.deadline.IsZero() && !time.Now().Before(a.deadline)
}

// Ended is the error of a statement that failed on its socket because
// ctx ended (Armed.Ended): it returns once ctx has ended too (a caller that
// asks ctx whether the statement timed out hears so; the socket's deadline
// can pass a moment before ctx's timer fires), as ctx's error with err's
// text. err itself is not wrapped: a driver's error may say that nothing
// was sent, and have the statement tried again on another connection,
// after its context ended.
func Ended(ctx context.Context, err error) error {
	<-ctx.Done()
	return fmt.Errorf("%w: %v", ctx.Err(), err)
}
