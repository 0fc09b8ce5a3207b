package pessimistic

import (
	"context"
	"errors"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// cancelRepeat is how long a waitEnder waits for the lock statement to
// return after cancelling it before it cancels it again.
const cancelRepeat = 25 * time.Millisecond

// waitSession is the server session whose lock wait a waitEnder ends.
type waitSession struct {
	id int64
	// readAt is when id was read (client clock); zero: not known.
	readAt time.Time
	// discarded: the session's connection is not used again after the
	// wait (the driver closed it), so the whole session may be ended.
	discarded bool
}

// waitEnder ends, from the Locker's own connection, the lock wait a session
// runs when the caller's context ends. Its steps: endWaitOnDone arms it
// before the lock statement; finished, called once the statement has
// returned, disarms it and reports whether it ran.
//
// A cancel (KILL QUERY, pg_cancel_backend) that reaches the server before
// it has started the lock statement (sent just before the context ended)
// is forgotten when the statement starts, which then waits out its bound
// and may be granted the row at the holder's release. So:
//   - a session whose connection is discarded anyway is ended whole (KILL
//     CONNECTION): a killed session runs nothing more;
//   - a session that lives on (a hold's, taking more rows) is cancelled
//     again every cancelRepeat until its statement returns.
type waitEnder struct {
	l     *Locker
	s     waitSession
	names []string
	// stmtDone is closed when the statement has returned; done when the
	// ender's goroutine has (it ran: stop reported false).
	stmtDone, done chan struct{}
	stop           func() bool
}

// endWaitOnDone arms a waitEnder for session s, which is about to run a
// lock statement for names, to end its wait when ctx ends.
func (l *Locker) endWaitOnDone(ctx context.Context, s waitSession, names []string) *waitEnder {
	e := &waitEnder{l: l, s: s, names: names, stmtDone: make(chan struct{}), done: make(chan struct{})}
	e.stop = context.AfterFunc(ctx, e.run)
	return e
}

// finished tells e that the statement has returned, and reports whether e
// ran (then it has finished too: the session may run its next statement).
// A nil e never runs.
func (e *waitEnder) finished() bool {
	if e == nil {
		return false
	}
	close(e.stmtDone)
	if e.stop() {
		return false
	}
	<-e.done
	return true
}

// run ends the wait: once for a discarded session, until the statement
// returns for one that lives on.
func (e *waitEnder) run() {
	defer close(e.done)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for {
		if err := e.once(ctx); err != nil {
			e.l.log.Warn("pessimistic: end an abandoned lock wait", "lock_key", labelOf(e.names), "error", err)
			return
		}
		if e.s.discarded {
			return
		}
		select {
		case <-e.stmtDone:
			return
		case <-ctx.Done():
			return
		case <-time.After(cancelRepeat):
		}
	}
}

// once sends one end: on the Locker's own connection when it has one (on
// the pool otherwise). A discarded session is killed whole only when that
// connection was opened before the session's id was read: it has talked
// to the same server run since, so the id is still that session's.
func (e *waitEnder) once(ctx context.Context) error {
	l := e.l
	err := l.withSide(ctx, false, func(q store.Querier) error {
		if e.s.discarded && !e.s.readAt.IsZero() && l.side.opened.Before(e.s.readAt) {
			return l.db.KillSession(ctx, q, e.s.id)
		}
		return l.db.CancelStatement(ctx, q, e.s.id)
	})
	if errors.Is(err, errNoSide) {
		err = l.db.CancelStatement(ctx, nil, e.s.id)
	}
	return err
}
