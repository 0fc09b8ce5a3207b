package pessimistic

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/store"
)

// Lock takes more names inside this lock's transaction, waiting in the
// database's lock queue (bounded by ctx and Config.LockTimeout) for their
// pessimistic holders. The names then belong to this hold: they are
// released with it, Names lists them, and TokenOf gives their tokens when the
// lock was acquired WithToken.
//
// Use Lock, not another Acquire, to take a second name while holding one:
// Acquire runs a transaction of its own, so two holders that each wait for
// the other's name that way form a cycle the database cannot see, and both
// wait until their bounds. With Lock the waits are in the holders' own
// transactions: the database detects the deadlock and one of the calls
// returns an error wrapping dblock.ErrDeadlock. On PostgreSQL that
// holder keeps what it held before the call (Lock rolls back to a savepoint
// taken before it); on MySQL and MariaDB the server rolls the victim's whole
// transaction back, so the lock is lost (dblock.ErrLost with ErrTxEnded).
//
// A name held by an unexpired lease (optimistic or fair mode) makes Lock
// fail at once with dblock.ErrNotAcquired and a *dblock.HeldError; it does
// not wait for the lease. Missing rows are created first. On SQLite, whose
// lock is the whole database, Lock only creates and checks the rows; a lock
// that asked for tokens cannot take more names there (their tokens would
// have to be issued before the database was locked).
//
// Lock serializes with the hold's other handles; do not call it while
// another goroutine runs statements on Tx.
func (l *Lease) Lock(ctx context.Context, names ...string) error {
	return l.lockMore(ctx, "lock", names, false)
}

// TryLock is Lock that does not wait: a name held by another transaction
// fails it at once with dblock.ErrNotAcquired, and the hold keeps what it
// held before the call.
func (l *Lease) TryLock(ctx context.Context, names ...string) error {
	return l.lockMore(ctx, "try lock", names, true)
}

func (l *Lease) lockMore(ctx context.Context, op string, names []string, try bool) error {
	h := l.h
	lk := h.l
	label := labelOf(names)
	if err := l.canLockMore(names); err != nil {
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	h.spMu.Lock()
	defer h.spMu.Unlock()
	add, withTokens, err := lk.namesToAdd(h, names)
	if err != nil {
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	if len(add) == 0 {
		return nil
	}
	if withTokens && !lk.caps.RowLocks {
		return fmt.Errorf("pessimistic: %s %q: %w: on SQLite a lock that asked for tokens cannot take more names; take them all at once (AcquireMany)",
			op, label, dblock.ErrInvalidOption)
	}
	if lk.caps.RowLocks && !lk.sideWanted() {
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, errNoSide)
	}
	wait := lk.lockWait
	if try {
		wait = 0
	}
	if err := lk.lockInTx(ctx, h, add, try, wait); err != nil {
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	var tokens map[string]dblock.Token
	if withTokens {
		if tokens, err = lk.moreTokens(ctx, h, add); err != nil {
			return fmt.Errorf("pessimistic: %s %q: token: %w", op, label, err)
		}
	}
	if err := lk.addNames(h, add, tokens); err != nil {
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	return nil
}

// namesToAdd returns, sorted, the names of names that h does not hold yet,
// and whether h carries fencing tokens. A name this owner holds in another
// transaction is refused: locking it would wait for itself.
func (lk *Locker) namesToAdd(h *hold, names []string) (add []string, withTokens bool, err error) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if h.ended || h.lost != nil {
		return nil, false, dblock.ErrReleased
	}
	for _, n := range names {
		if slices.Contains(h.names, n) || slices.Contains(add, n) {
			continue
		}
		if o, ok := lk.holds[holdKey{n, h.owner}]; ok && o != h && !o.ended && o.lost == nil {
			return nil, false, fmt.Errorf("%w: %q is already held by this owner in another transaction (it would wait for itself)",
				dblock.ErrInvalidOption, n)
		}
		add = append(add, n)
	}
	slices.Sort(add)
	return add, h.tokens != nil, nil
}

// addNames records names add, now locked in h's transaction, and their
// tokens (nil: none), unless the hold ended while they were taken.
func (lk *Locker) addNames(h *hold, add []string, tokens map[string]dblock.Token) error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if h.ended || h.lost != nil {
		return fmt.Errorf("%w: the hold ended meanwhile", dblock.ErrNotAcquired)
	}
	for _, n := range add {
		h.names = append(h.names, n)
		lk.holds[holdKey{n, h.owner}] = h
		if tokens != nil {
			h.tokens[n] = tokens[n]
		}
	}
	slices.Sort(h.names)
	return nil
}

// moreTokens gives the names Lock has just locked in h their tokens. The
// rows are locked, whether or not ctx has ended since: their tokens are not
// cut short by it.
func (l *Locker) moreTokens(ctx context.Context, h *hold, names []string) (map[string]dblock.Token, error) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	tokens, err := l.bumpTokens(tctx, h, names)
	if err != nil {
		l.txTrouble(h, err)
	}
	return tokens, err
}

// canLockMore refuses what Lock cannot take more of: no names, a bad one,
// a shared hold, or a hold that ended.
func (l *Lease) canLockMore(names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("%w: no names", dblock.ErrInvalidName)
	}
	if l.h.shared {
		return fmt.Errorf("%w: a shared hold locks no more names", dblock.ErrInvalidOption)
	}
	for _, n := range names {
		if err := dblock.ValidateName(n); err != nil {
			return err
		}
	}
	return l.Err()
}

// lockInTx locks the rows of names (sorted, none held by h) in h's
// transaction, creating missing rows, and refuses names held by a lease. The
// wait is bounded server-side (lock timeout) by ctx's deadline and wait
// (zero: none), and cancelled from the Locker's own connection when ctx ends
// first: a statement cut short by its context would close the connection,
// and with it the whole hold.
//
// Where a failed statement aborts the transaction (PostgreSQL) a savepoint
// keeps the hold through a refusal or a deadlock. Where a savepoint keeps
// the row locks taken after it and a locking read of a missing key locks
// its gap (MySQL, which keeps the transaction after a refused lock; only a
// deadlock rolls it back, savepoint or not), the rows are first created and
// checked for lease holders without locking (precheck).
func (l *Locker) lockInTx(ctx context.Context, h *hold, names []string, try bool, wait time.Duration) error {
	m := &moreRows{l: l, h: h, ctx: ctx, sctx: context.WithoutCancel(ctx), names: names, try: try, wait: wait}
	if l.caps.SavepointKeepsLocks {
		if err := m.precheck(); err != nil {
			return m.endedBy(err)
		}
	}
	if err := m.savepoint(); err != nil {
		return err
	}
	for range 5 {
		missing, err := m.lockOnce()
		if err != nil {
			return m.undo(err)
		}
		if len(missing) == 0 {
			return m.keep()
		}
		// Missing rows: PostgreSQL has no gap locks, so the rows locked
		// so far stay locked while the others are created.
		if err := m.ensure(missing); err != nil {
			return m.undo(m.endedBy(err))
		}
	}
	return m.undo(errors.New("lock rows keep disappearing"))
}

// moreRows is one lockInTx call's state; sctx is ctx without its
// cancellation, for the statements that must not be cut short.
type moreRows struct {
	l         *Locker
	h         *hold
	ctx, sctx context.Context
	names     []string
	try       bool
	wait      time.Duration
}

// lockSavepoint names the savepoint lockInTx takes.
const lockSavepoint = "dblock_lock"

// ensure creates the rows of missing: in the transaction on SQLite (whose
// lock is the transaction's), else on the Locker's own connection.
func (m *moreRows) ensure(missing []string) error {
	db := m.l.db
	for _, n := range missing {
		var err error
		if !m.l.caps.RowLocks {
			err = db.EnsureRow(m.sctx, m.h.tx, n)
		} else {
			err = m.l.withSide(m.ctx, true, func(q store.Querier) error { return db.EnsureRow(m.ctx, q, n) })
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// precheck creates the rows and refuses a name a lease holds, without
// locking anything.
func (m *moreRows) precheck() error {
	if err := m.ensure(m.names); err != nil {
		return err
	}
	for _, n := range m.names {
		var holder store.Holder
		err := m.l.withSide(m.ctx, true, func(q store.Querier) error {
			var err error
			holder, err = m.l.db.LeaseHolder(m.ctx, q, n)
			return err
		})
		if err != nil {
			return err
		}
		if holder.Held() {
			return holder.HeldError(n, nil)
		}
	}
	return nil
}

// savepoint marks where undo rolls back to, where a failed statement would
// abort the transaction.
func (m *moreRows) savepoint() error {
	if !m.l.caps.ErrorAbortsTx {
		return nil
	}
	if err := m.l.db.Savepoint(m.sctx, m.h.tx, lockSavepoint); err != nil {
		m.l.txTrouble(m.h, err)
		return err
	}
	return nil
}

// undo returns to the savepoint (where there is one) and returns cause.
func (m *moreRows) undo(cause error) error {
	if !m.l.caps.ErrorAbortsTx {
		return cause
	}
	db := m.l.db
	if err := db.RollbackToSavepoint(m.sctx, m.h.tx, lockSavepoint); err != nil {
		m.l.txTrouble(m.h, err)
		return errjoin.Join(cause, err)
	}
	if err := db.ReleaseSavepoint(m.sctx, m.h.tx, lockSavepoint); err != nil {
		m.l.txTrouble(m.h, err)
		return errjoin.Join(cause, err)
	}
	return cause
}

// keep forgets the savepoint, keeping the rows locked.
func (m *moreRows) keep() error {
	if !m.l.caps.ErrorAbortsTx {
		return nil
	}
	if err := m.l.db.ReleaseSavepoint(m.sctx, m.h.tx, lockSavepoint); err != nil {
		m.l.txTrouble(m.h, err)
		return err
	}
	return nil
}

// lockOnce runs the lock statement once and returns the names whose rows
// are missing, or an error (a lease holder's *dblock.HeldError among them).
func (m *moreRows) lockOnce() ([]string, error) {
	l, h, ctx := m.l, m.h, m.ctx
	p := store.RowLockParams{NoWait: m.try, IdleTimeout: h.ttl, Wait: m.wait}
	var end *waitEnder
	if !m.try && l.caps.RowLocks && ctx.Done() != nil {
		end = l.endWaitOnDone(ctx, waitSession{id: h.session.ID}, m.names)
	}
	found, _, err := l.lockStmtWait(m.sctx, ctx, h, m.names, p)
	// A statement granted as ctx ended keeps its rows (MySQL could not give
	// them back inside the transaction): the cancels sent meanwhile reached
	// a session between statements, which forgets them.
	end.finished()
	if err != nil {
		return nil, m.lockErr(err)
	}
	var missing []string
	for _, n := range m.names {
		holder, ok := found.holder(n)
		if !ok {
			missing = append(missing, n)
			continue
		}
		if holder.Held() {
			return nil, holder.HeldError(n, nil)
		}
	}
	return missing, nil
}

// endedBy makes an error met once ctx ended a refusal that names ctx's
// cause (unless it is a deadlock, which is the database's verdict).
func (m *moreRows) endedBy(err error) error {
	if m.ctx.Err() != nil && !errors.Is(err, dblock.ErrDeadlock) && !errors.Is(err, dblock.ErrNotAcquired) {
		return fmt.Errorf("%w: %w", dblock.ErrNotAcquired, errjoin.Join(context.Cause(m.ctx), err))
	}
	return err
}

// lockErr reads a failed lock statement: the end of ctx makes it a
// refusal; a deadlock where it ends the transaction, or a broken
// connection, loses the hold.
func (m *moreRows) lockErr(err error) error {
	l, h := m.l, m.h
	if m.ctx.Err() != nil && !errors.Is(err, dblock.ErrDeadlock) {
		err = fmt.Errorf("%w: %w", dblock.ErrNotAcquired, errjoin.Join(context.Cause(m.ctx), err))
	}
	switch {
	case l.caps.TxEndsOnDeadlock:
		l.txTrouble(h, err)
		if errors.Is(err, dblock.ErrDeadlock) {
			err = fmt.Errorf("%w: %w", err, h.lostErr())
		}
	case isConnErr(err):
		l.txTrouble(h, err)
	}
	return err
}

// lockStmtWait is lockStmt with the server-side bound taken from waitCtx's
// deadline as well as p.Wait, the statement itself running on sctx (which
// is not cancelled).
func (l *Locker) lockStmtWait(sctx, waitCtx context.Context, h *hold, names []string, p store.RowLockParams) (lockedRows, store.SessionRef, error) {
	if !p.NoWait {
		if dl, ok := waitCtx.Deadline(); ok {
			left := max(time.Until(dl), time.Millisecond)
			if p.Wait <= 0 || left < p.Wait {
				p.Wait = left
			}
		}
	}
	return l.lockStmt(sctx, h, names, p)
}

// lostErr returns the hold's loss as a *dblock.LostError (nil if not lost).
func (h *hold) lostErr() error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	if h.lost == nil {
		return nil
	}
	return &dblock.LostError{Name: labelOf(h.names), Reason: h.lost}
}
