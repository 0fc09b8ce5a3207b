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
	// clientPort, when not zero, is the TCP port the session's client
	// connected from: id came from the driver, not the server, and is
	// ended only if the server lists it from that port (not a pooler's).
	clientPort int
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
	// ctx is the context whose end ends the wait.
	ctx context.Context
	// stmtDone is closed when the statement has returned; done when the
	// ender's goroutine has (it ran: stop reported false).
	stmtDone, done chan struct{}
	stop           func() bool
}

// endWaitOnDone arms a waitEnder for session s, which is about to run a
// lock statement for names, to end its wait when ctx ends.
func (l *Locker) endWaitOnDone(ctx context.Context, s waitSession, names []string) *waitEnder {
	e := l.newWaitEnder(ctx, s, names)
	e.stop = context.AfterFunc(ctx, e.run)
	return e
}

// newWaitEnder returns a waitEnder for session s's lock statement for
// names, whose wait ctx ends, neither armed nor run.
func (l *Locker) newWaitEnder(ctx context.Context, s waitSession, names []string) *waitEnder {
	return &waitEnder{l: l, s: s, names: names, ctx: ctx, stmtDone: make(chan struct{}), done: make(chan struct{})}
}

// finished tells e that the statement has returned, and reports whether e
// ran (then it has finished too: the session may run its next statement).
// A nil e never runs. When the context has ended but its end has not
// reached e yet (a context tells its watchers one after another, and the
// driver's watcher, which closed the connection under the statement, can
// be told first), e runs here for a discarded session: it may still be
// waiting at the server. (A session that lives on returned from its
// statement by itself: a cancel now could only hit its next one.)
func (e *waitEnder) finished() bool {
	if e == nil {
		return false
	}
	close(e.stmtDone)
	if e.stop() {
		if !e.s.discarded || e.ctx.Err() == nil {
			return false
		}
		e.run()
		return true
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
// to the same server run since, so the id is still that session's. Then
// once waits until the server no longer lists a discarded session (its
// driver closed the connection, so it ends even when only its statement
// was cancelled): until then the server could still grant it the row.
func (e *waitEnder) once(ctx context.Context) error {
	l := e.l
	err := l.withSide(ctx, false, func(q store.Querier) error {
		return e.end(ctx, q, e.s.discarded && !e.s.readAt.IsZero() && l.side.opened.Before(e.s.readAt))
	})
	if errors.Is(err, errNoSide) {
		err = e.end(ctx, nil, false)
	}
	return err
}

// end kills the session (or cancels its statement) from q, and waits for a
// discarded one to be gone.
func (e *waitEnder) end(ctx context.Context, q store.Querier, kill bool) error {
	db := e.l.db
	if e.s.clientPort != 0 {
		ours, err := db.SessionFromPort(ctx, q, e.s.id, e.s.clientPort)
		if err != nil || !ours {
			return err // Gone already, or not a session of the server's.
		}
	}
	var err error
	if kill {
		err = db.KillSession(ctx, q, e.s.id)
	} else {
		err = db.CancelStatement(ctx, q, e.s.id)
	}
	if err != nil || !e.s.discarded {
		return err
	}
	return db.AwaitSessionEnd(ctx, q, e.s.id)
}

// endCutOff ends the session of h, whose lock statement for names failed
// with err, when ctx cut the statement off in flight and the driver knows
// the session's id (PostgreSQL through pgx: store.DiscardedSession), and
// returns err once the server no longer lists the session. The driver
// closed the connection, but its cancel of the statement travels on a
// connection of its own after the call has returned, so the server could
// still run the statement (a NOWAIT sent just before), or still wait in
// it, and be granted the row after the caller has gone: a release right
// after would leave the name to a session nobody uses until it ends.
// Where the id is not known without asking (MySQL: see lockRows for its
// waits), the server's own noticing of the closed connection ends it.
func (l *Locker) endCutOff(ctx context.Context, h *hold, names []string, err error) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	s, ok := l.db.DiscardedSession(h.conn.Conn)
	if !ok {
		return err
	}
	// h.start is after h's connection was taken from the pool: its
	// session was alive then (see once).
	e := l.newWaitEnder(ctx, waitSession{id: s.ID, readAt: h.start, discarded: true, clientPort: s.ClientPort}, names)
	close(e.stmtDone) // The statement has returned.
	e.run()
	return err
}
