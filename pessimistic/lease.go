package pessimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/internal/store"
)

// hold is one locking transaction: one or more names (AcquireMany), one
// owner, and every handle that re-entered it. Fields below mu are guarded by
// the Locker's mu.
type hold struct {
	l        *Locker
	owner    string
	conn     *sqlx.Conn
	tx       *sqlx.Tx
	session  store.SessionRef // the locking session; its ID is zero on SQLite
	ttl      time.Duration
	shared   bool          // AcquireShared: the row's shared lock
	deferred bool          // The transaction's BEGIN goes with its first lock statement (Locker.defersBegin)
	prevBusy time.Duration // SQLite: busy timeout to restore; -1 when untouched
	start    time.Time
	// lockedAt is the database's clock when the rows were locked (the
	// history's acquired_at).
	lockedAt time.Time

	// txCancel cancels the context the transaction began with: database/sql
	// then rolls it back (after a statement in flight) and fails every later
	// statement with sql.ErrTxDone, and pgx gives up a COMMIT or ROLLBACK
	// waiting on the network. It poisons a lost hold.
	txCancel context.CancelFunc
	// interruptConn, when not nil, makes the statement under way on conn
	// fail at once (MariaDB and MySQL on a pool dialect.Open opened:
	// store.InterruptOf), so that a COMMIT past its bound is ended without
	// a goroutine of its own. Set before the hold is used; connGone
	// (guarded by interruptMu) stops it once conn went back to the pool.
	interruptConn func()
	interruptMu   sync.Mutex
	connGone      bool

	// spMu serializes the savepoint statements of re-entrant handles and
	// Lock; stack and spSeq are guarded by it.
	spMu  sync.Mutex
	stack []*Lease // re-entrant handles whose savepoint is live, oldest first
	spSeq int

	// Guarded by Locker.mu.
	names      []string
	tokens     map[string]dblock.Token
	count      int
	rollback   bool  // The first handle asked for a rollback of the whole transaction.
	rollbackBy error // Why rollback is set, for the handles that then commit.
	ended      bool
	lost       error
	lastSeen   time.Time
	handles    []*Lease
	gates      []string      // gate keys held until the hold ends or is lost
	recording  chan struct{} // closed when a lost hold's history entries are written (nil: none)
}

// Lease is a held pessimistic lock: the embedded *dblock.Lease (Name, Owner,
// Token, Done, Err, Release) plus the locking transaction. Release commits.
type Lease struct {
	*dblock.Lease
	h        *hold
	ctl      mode.Control
	rollback atomic.Bool

	// sp is the savepoint taken when this handle re-entered the hold ("" for
	// the first handle). voided (guarded by h.spMu) says why its work is
	// gone: an earlier re-entrant handle rolled back to its own savepoint.
	sp     string
	voided error
}

// Tx returns the locking transaction. Statements run on it are part of the
// critical section and commit (or roll back) with the lock. Do not call its
// Commit or Rollback: end the lock with Commit, Rollback or Release.
func (l *Lease) Tx() *sql.Tx { return l.h.tx.Tx }

// Names returns the names this lock holds, in order (several for
// AcquireMany, and those added by Lock).
func (l *Lease) Names() []string {
	l.h.l.mu.Lock()
	defer l.h.l.mu.Unlock()
	return slices.Clone(l.h.names)
}

// TokenOf returns the fencing token of one of the held names (zero when no
// token was asked for).
func (l *Lease) TokenOf(name string) dblock.Token {
	l.h.l.mu.Lock()
	defer l.h.l.mu.Unlock()
	return l.h.tokens[name]
}

// Commit releases the lock by committing its transaction (the same as
// Release). When other handles of the same owner still hold the name, the
// transaction ends with the last of them. It returns an error wrapping
// ErrRolledBack when this handle's work will not be committed: the first
// handle asked for a rollback, an earlier re-entrant handle rolled back past
// this one's savepoint, or (PostgreSQL) a failed statement had aborted the
// transaction. On MySQL and MariaDB, a transaction that the server ended
// (deadlock victim, implicit commit) is found before COMMIT is sent: Commit
// then reports the lock lost (dblock.ErrLost with ErrTxEnded).
//
// ctx bounds the call: when it ends first, the connection is closed (on
// MySQL, its session killed), and an error wrapping dblock.ErrUnavailable
// says that the outcome is unknown.
func (l *Lease) Commit(ctx context.Context) error { return l.Release(ctx) }

// Rollback releases the lock by rolling its transaction back. A re-entrant
// handle (not the first acquisition of the hold) rolls back only its own
// work, to the savepoint taken when it re-entered, and the transaction goes
// on; the first handle's Rollback rolls the whole transaction back, when the
// last handle ends (a later Commit by another handle then reports
// ErrRolledBack).
func (l *Lease) Rollback(ctx context.Context) error {
	l.rollback.Store(true)
	return l.Release(ctx)
}

// register records a fresh hold and returns its first handle.
func (l *Locker) register(h *hold, o mode.Options, label string, start time.Time) (*Lease, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = h.end(context.Background(), true)
		l.openGates(h)
		return nil, fmt.Errorf("pessimistic: acquire %q: %w: %w", label, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	h.count = 1
	h.lastSeen = time.Now()
	for _, n := range h.names {
		l.holds[holdKey{n, h.owner}] = h
	}
	l.all[h] = struct{}{}
	lease := l.newHandle(h, label)
	l.mu.Unlock()
	l.acquired(lease, start)
	return lease, nil
}

// newHandle makes a handle on h; l.mu is held.
func (l *Locker) newHandle(h *hold, label string) *Lease {
	var max dblock.Token
	for _, t := range h.tokens {
		if t > max {
			max = t
		}
	}
	lease := &Lease{h: h}
	dl, ctl := mode.NewLease(mode.LeaseParams{
		Name: label, Owner: h.owner, Mode: dblock.ModePessimistic, Token: int64(max), Reentry: h.count,
		Release: func(ctx context.Context) error { return l.releaseHandle(ctx, lease) },
	})
	lease.Lease, lease.ctl = dl, ctl
	h.handles = append(h.handles, lease)
	return lease
}

func (l *Locker) acquired(lease *Lease, start time.Time) {
	waited := time.Since(start)
	if l.debug() {
		l.log.Debug("pessimistic: acquired", "lock_key", lease.Name(), "owner", lease.Owner(), "token", int64(lease.Token()))
	}
	l.events.Acquired(lease.Name(), lease.Owner(), lease.Token(), waited)
}

// releaseHandle ends one handle. A re-entrant handle first settles its
// savepoint (released on commit, rolled back to on rollback); the last
// handle of a hold ends its transaction: commit, or rollback if the first
// handle asked for one or the hold was lost.
func (l *Locker) releaseHandle(ctx context.Context, lease *Lease) (err error) {
	ctx, span := l.rec.BeginSpan(ctx, obs.SpanRelease, lease.Name())
	defer func() { obs.EndSpan(span, lease.Token(), err) }()
	h := lease.h
	rb := lease.rollback.Load()
	var spErr error
	if lease.sp != "" {
		spErr = l.endSavepoint(ctx, lease, rb)
	}
	l.mu.Lock()
	if lease.sp == "" && rb && !h.rollback {
		h.rollback = true
		h.rollbackBy = fmt.Errorf("%w: the first handle of %q asked for a rollback", ErrRolledBack, lease.Name())
	}
	h.count--
	if h.count > 0 {
		if spErr == nil && !rb && h.rollback && h.lost == nil {
			spErr = h.rollbackBy
		}
		l.mu.Unlock()
		l.released(lease, h)
		return spErr
	}
	h.ended = true
	l.forget(h)
	rollback := h.rollback || h.lost != nil
	rollbackBy := h.rollbackBy
	lost := h.lost
	l.mu.Unlock()

	err = l.endBounded(ctx, h, rollback)
	switch {
	case err != nil && lost == nil && (isConnErr(err) || errors.Is(err, ErrTxEnded)):
		reason := dblock.ErrConnLost
		if errors.Is(err, ErrTxEnded) {
			reason = err
		}
		l.lose(h, reason, true)
	case lost == nil:
		l.recordEnd(ctx, h, store.HistoryReleased)
		if err == nil && rollback && !rb && rollbackBy != nil {
			err = rollbackBy
		}
	}
	if err == nil {
		err = spErr
	}
	l.openGates(h)
	l.awaitRecording(ctx, h)
	l.released(lease, h)
	return err
}

// endSavepoint settles the savepoint of a re-entrant handle: on commit it is
// released (when it is the newest; an older one is left to the transaction's
// end), on rollback the transaction goes back to it, which also undoes the
// work of every handle that re-entered after this one (their Commit then
// reports ErrRolledBack). It returns the error for this handle's Release.
func (l *Locker) endSavepoint(ctx context.Context, lease *Lease, rb bool) error {
	h := lease.h
	h.spMu.Lock()
	defer h.spMu.Unlock()
	if lease.voided != nil {
		if rb {
			return nil
		}
		return lease.voided
	}
	idx := slices.Index(h.stack, lease)
	if idx < 0 {
		return nil
	}
	l.mu.Lock()
	gone := h.ended || h.lost != nil
	last := h.count == 1
	l.mu.Unlock()
	if gone {
		h.stack = slices.Delete(h.stack, idx, idx+1)
		return nil
	}
	if rb {
		later := h.stack[idx+1:]
		for _, o := range later {
			o.voided = fmt.Errorf("%w: handle %d of %q rolled back to its savepoint, taken before this handle re-entered",
				ErrRolledBack, lease.Reentry(), lease.Name())
		}
		h.stack = h.stack[:idx]
		err := l.db.RollbackToSavepoint(ctx, h.tx, lease.sp)
		if err == nil && !last {
			err = l.db.ReleaseSavepoint(ctx, h.tx, lease.sp)
		}
		if err != nil {
			l.txTrouble(h, err)
			return fmt.Errorf("rollback to savepoint: %w", err)
		}
		return nil
	}
	if idx == len(h.stack)-1 {
		h.stack = h.stack[:idx]
		if last {
			return nil // The transaction ends next; no need to release.
		}
		if err := l.db.ReleaseSavepoint(ctx, h.tx, lease.sp); err != nil {
			l.txTrouble(h, err)
			return fmt.Errorf("release savepoint: %w", err)
		}
		return nil
	}
	h.stack = slices.Delete(h.stack, idx, idx+1)
	return nil
}

// forget removes h from the Locker's maps; l.mu is held.
func (l *Locker) forget(h *hold) {
	for _, n := range h.names {
		if cur := l.holds[holdKey{n, h.owner}]; cur == h {
			delete(l.holds, holdKey{n, h.owner})
		}
	}
	delete(l.all, h)
}

func (l *Locker) released(lease *Lease, h *hold) {
	if l.debug() {
		l.log.Debug("pessimistic: released", "lock_key", lease.Name(), "owner", lease.Owner(), "token", int64(lease.Token()))
	}
	l.events.Released(lease.Name(), lease.Owner(), lease.Token(), time.Since(h.start))
}

// debug reports whether the Locker's logger writes debug lines: the lines
// of every acquisition and release are built only then (their arguments
// cost allocations even when the handler drops them).
func (l *Locker) debug() bool {
	return l.log.Enabled(context.Background(), slog.LevelDebug)
}

// interruptStatement makes the statement under way on the hold's
// connection fail (see interruptConn), unless the connection was given
// back: it may be someone else's by then.
func (h *hold) interruptStatement() {
	h.interruptMu.Lock()
	defer h.interruptMu.Unlock()
	if h.interruptConn != nil && !h.connGone {
		h.interruptConn()
	}
}

// giveConn returns the hold's connection to the pool, or destroys it (see
// closeConn), once: a lost hold's teardown (loseUnreachable) and its
// caller's release may both get here, and database/sql's Conn.Raw panics on
// a Conn that another goroutine closes under it. The first call decides;
// interruptStatement leaves the connection alone from then on.
func (h *hold) giveConn(destroy bool) {
	h.interruptMu.Lock()
	gone := h.connGone
	h.connGone = true
	h.interruptMu.Unlock()
	if !gone {
		closeConn(h.conn, destroy)
	}
}
