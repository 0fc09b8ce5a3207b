package pessimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

// side is the Locker's own connection (PostgreSQL, MySQL): the session
// watcher asks the server on it, fencing tokens are committed on it, lock
// rows are created and abandoned waits cancelled from it. It is taken from
// the pool before the first holder's connection and kept while the Locker
// holds or takes locks, so that none of this competes with holders for the
// pool: a pool exhausted by holders cannot stall the watcher (which would
// then have to declare live locks lost) nor deadlock a holder that needs a
// token.
type side struct {
	mu   sync.Mutex
	conn *sqlx.Conn
	// opened is when conn was taken from the pool (client clock).
	opened time.Time
	// inc is the server incarnation conn talks to, learned by the watcher
	// once per connection (nil until then, and whenever conn changes).
	inc *store.Incarnation
}

// set replaces the connection (nil: none), forgetting what was learned on
// the old one; s.mu is held.
func (s *side) set(conn *sqlx.Conn) {
	s.conn = conn
	s.opened = time.Now()
	s.inc = nil
}

// onIncarnation reports whether h's lock was taken on inc, the incarnation
// of the server that the Locker's own connection talks to (see
// store.Incarnation.Covers), so that its session id means something
// there; side.mu is held. Besides what the database clock tells, a lock
// taken after that connection was taken from the pool was taken on inc: the
// connection, alive now, was talking to inc from before then (a connection
// does not outlive its server), so inc was running when the lock statement
// was sent. That settles the locks whose time alone cannot be placed (taken
// in the second a MySQL server started); a lock taken before the connection
// was opened, in such a second, is taken for an earlier incarnation's.
func (l *Locker) onIncarnation(h *hold, inc store.Incarnation) bool {
	return inc.Covers(h.session) || h.session.Server == inc.Server && h.start.After(l.side.opened)
}

// sideIncarnation returns the server incarnation that the Locker's own
// connection q talks to, learning it on the first call for that connection.
// Call it only inside withSide (which holds side.mu), with its q.
func (l *Locker) sideIncarnation(ctx context.Context, q store.Querier) (store.Incarnation, error) {
	if l.side.inc == nil {
		inc, err := l.db.ServerIncarnation(ctx, q)
		if err != nil {
			return inc, err
		}
		l.side.inc = &inc
	}
	return *l.side.inc, nil
}

// errNoSide: the pool is limited to one connection, so the Locker cannot
// keep one of its own.
var errNoSide = fmt.Errorf("%w: the pool allows a single connection (SetMaxOpenConns(1)); a fencing token (and creating rows for Lock) needs a second one, so that it is committed before it is handed out",
	dblock.ErrInvalidOption)

// sideWanted reports whether the Locker keeps a connection of its own: on
// the server databases, when the pool has room for one besides a holder.
func (l *Locker) sideWanted() bool {
	return l.caps.RowLocks && l.db.Stats().MaxOpenConnections != 1
}

// reserveSide makes sure the Locker has its own connection before an
// acquisition takes a holder's, waiting for the pool as the acquisition
// would (try: not at all), and that the watcher runs.
func (l *Locker) reserveSide(ctx context.Context, try bool) error {
	if !l.sideWanted() {
		return nil
	}
	l.side.mu.Lock()
	if l.side.conn == nil {
		conn, err := l.poolConn(ctx, try)
		if err != nil {
			l.side.mu.Unlock()
			return err
		}
		l.side.set(conn)
	}
	l.side.mu.Unlock()
	l.mu.Lock()
	if !l.watching && !l.closed {
		l.watching = true
		l.wg.Add(1)
		go l.watch()
	}
	l.mu.Unlock()
	return nil
}

// withSide runs fn on the Locker's own connection, opening it again if it
// broke (wait: waiting for the pool as long as ctx allows; otherwise failing
// with ErrPoolExhausted when the pool has no free connection). A connection
// error destroys it, to be opened again next time.
func (l *Locker) withSide(ctx context.Context, wait bool, fn func(q store.Querier) error) error {
	if !l.sideWanted() {
		return errNoSide
	}
	l.side.mu.Lock()
	defer l.side.mu.Unlock()
	if l.side.conn == nil {
		conn, err := l.poolConn(ctx, !wait)
		if err != nil {
			return err
		}
		l.side.set(conn)
	}
	err := fn(l.side.conn)
	if err != nil && (isConnErr(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// Broken, or a statement cut short by its context (which the
		// drivers answer by closing the connection): open a fresh one
		// next time.
		closeConn(l.side.conn, true)
		l.side.set(nil)
	}
	return err
}

// dropSide gives the Locker's connection back to the pool.
func (l *Locker) dropSide() {
	l.side.mu.Lock()
	conn := l.side.conn
	l.side.set(nil)
	l.side.mu.Unlock()
	if conn != nil {
		closeConn(conn, false)
	}
}

// poolConn takes a connection from the pool. With try, it does not wait for
// one to come back: a pool seen exhausted fails at once, and the wait is
// bounded by TryConnWait otherwise (a connection returned meanwhile, or one
// being dialled); the error then wraps dblock.ErrNotAcquired and
// ErrPoolExhausted.
func (l *Locker) poolConn(ctx context.Context, try bool) (*sqlx.Conn, error) {
	if !try {
		conn, err := l.db.Connx(ctx)
		return conn, l.db.Classify(err)
	}
	exhausted := func() error {
		st := l.db.Stats()
		if st.MaxOpenConnections > 0 && st.Idle == 0 && st.OpenConnections >= st.MaxOpenConnections {
			return fmt.Errorf("%w: %w (%d of %d in use)", dblock.ErrNotAcquired, ErrPoolExhausted, st.InUse, st.MaxOpenConnections)
		}
		return nil
	}
	if err := exhausted(); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, TryConnWait)
	defer cancel()
	conn, err := l.db.Connx(cctx)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		if xerr := exhausted(); xerr != nil {
			return nil, xerr
		}
		return nil, fmt.Errorf("%w: no connection within %v: %w", dblock.ErrUnavailable, TryConnWait, err)
	}
	return conn, l.db.Classify(err)
}

// watch asks the server, every interval and on the Locker's own connection,
// which holding sessions still exist; a hold whose session is gone (killed,
// ended by the idle bound, server restarted) is lost with dblock.ErrConnLost.
// It runs while the Locker holds or takes locks, and gives the Locker's
// connection back when it stops.
//
// Why this and not a ping on the holding connection: the user runs
// statements on the lock's transaction concurrently, and a ping between two
// reads of a result set would break the protocol. Asking from another
// connection never touches the holding one. When the server cannot be asked
// (it is down or unreachable), a hold is declared lost once its session has
// gone unconfirmed for half its TTL: by then the server may already have
// ended it; its transaction is then ended on the client too (statements on
// Tx fail), so the holder stops acting as one. A pool with no free
// connection for the watcher (its own connection broke while holders use
// every other) says nothing about the sessions: it never counts towards
// that.
//
// A session id alone does not identify a session: a restarted MariaDB or
// MySQL counts connection ids from 1 again, and PostgreSQL's backend pids
// are reused by the operating system, so a new session may be found under a
// lost holder's id. Each hold therefore records what the lock statement
// returned besides the id (the database clock, MySQL's @@server_id,
// PostgreSQL's transaction start), and the watcher learns once per
// connection of its own which run of the server that connection talks to
// (store.Incarnation): a hold taken before that run began, or on another
// server, is lost whatever is found under its id, and on PostgreSQL the
// session found must still be in the locking transaction. The incarnation
// is learned on the connection the sessions are then asked on, never
// carried over from an earlier one, so a watcher whose own connection was
// re-opened after a restart, before it ever saw the holder's session gone,
// still compares with the new run.
func (l *Locker) watch() {
	defer l.wg.Done()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			l.mu.Lock()
			l.watching = false
			l.mu.Unlock()
			return
		case <-t.C:
		}
		holds, idle := l.watchedHolds()
		if idle {
			return
		}
		if len(holds) == 0 {
			continue
		}
		alive, err := l.askAlive(holds)
		l.judge(holds, alive, err)
		if l.hooks4test.watched != nil {
			l.hooks4test.watched(err)
		}
	}
}

// watchedHolds lists the holds whose sessions the watcher asks after. When
// the Locker neither holds nor takes a lock, the watcher stops instead
// (idle), giving back the Locker's own connection.
func (l *Locker) watchedHolds() (holds []*hold, idle bool) {
	// side.mu before mu: an acquisition that reserved the connection
	// has already counted itself in admitted.
	l.side.mu.Lock()
	l.mu.Lock()
	for h := range l.all {
		if h.session.ID != 0 && !h.ended && h.lost == nil {
			holds = append(holds, h)
		}
	}
	if len(l.all) == 0 && len(l.admitted) == 0 {
		l.watching = false
		conn := l.side.conn
		l.side.set(nil)
		l.mu.Unlock()
		l.side.mu.Unlock()
		if conn != nil {
			closeConn(conn, false)
		}
		return nil, true
	}
	l.mu.Unlock()
	l.side.mu.Unlock()
	return holds, false
}

// askAlive asks the server, on the Locker's own connection, which of the
// holds' sessions are alive. Holds taken on an earlier incarnation (or
// another server) are not asked: they are lost whatever runs under their
// ids now.
func (l *Locker) askAlive(holds []*hold) ([]bool, error) {
	timeout := max(4*l.interval, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	alive := make([]bool, len(holds))
	err := l.withSide(ctx, false, func(q store.Querier) error {
		inc, err := l.sideIncarnation(ctx, q)
		if err != nil {
			return err
		}
		var (
			ask []store.SessionRef
			at  []int
		)
		for i, h := range holds {
			if l.onIncarnation(h, inc) {
				ask = append(ask, h.session)
				at = append(at, i)
			}
		}
		found, err := l.db.SessionsAlive(ctx, q, ask)
		for j, ok := range found {
			alive[at[j]] = ok
		}
		return err
	})
	return alive, err
}

// judge acts on the watcher's answer: a hold whose session is alive (or
// that could not be asked for want of a connection) was seen now; one
// whose session is gone is lost; one the server could not be asked about
// is lost once it has gone unconfirmed for half its TTL.
func (l *Locker) judge(holds []*hold, alive []bool, err error) {
	now := time.Now()
	unknown := errors.Is(err, ErrPoolExhausted) || errors.Is(err, errNoSide)
	for i, h := range holds {
		switch {
		case err == nil && alive[i], unknown:
			l.mu.Lock()
			h.lastSeen = now
			l.mu.Unlock()
		case err == nil:
			l.lose(h, dblock.ErrConnLost, false)
		default:
			l.mu.Lock()
			stale := !h.ended && now.Sub(h.lastSeen) > h.ttl/2
			l.mu.Unlock()
			if stale {
				l.loseUnreachable(h, fmt.Errorf("%w: session unconfirmed: %w", dblock.ErrConnLost, err))
			}
		}
	}
}

// loseUnreachable declares h lost when the server could not be reached to
// confirm its session, and ends the session from this side: the transaction
// is ended in database/sql before the loss is announced (later statements on
// Tx fail with sql.ErrTxDone), and the connection is destroyed once the
// driver lets go of it, so that the server ends the session (and frees the
// lock) as soon as it hears from this client again, instead of the holder
// carrying on in a transaction it no longer owns.
func (l *Locker) loseUnreachable(h *hold, reason error) {
	end := func() {
		h.txCancel()
		txEnded(h.tx)
	}
	if !l.loseThen(h, reason, false, end) {
		return
	}
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		h.giveConn(true) // Waits for database/sql to end the transaction.
	}()
}

// txEnded waits (a second at most) until database/sql has marked tx ended
// after its context was cancelled: it does so on a goroutine of its own,
// and until then a statement run on tx still goes to the server. While the
// context is cancelled, Commit only reports that state (sql.ErrTxDone once
// ended) and sends nothing.
func txEnded(tx *sqlx.Tx) {
	deadline := time.Now().Add(time.Second)
	for pause := 10 * time.Microsecond; ; pause = min(2*pause, 10*time.Millisecond) {
		if errors.Is(tx.Commit(), sql.ErrTxDone) || time.Now().After(deadline) {
			return
		}
		time.Sleep(pause)
	}
}
