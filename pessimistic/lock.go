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
	db := lk.db
	kind := db.Dialect.Kind()
	label := labelOf(names)
	if len(names) == 0 {
		return fmt.Errorf("pessimistic: %s: %w: no names", op, dblock.ErrInvalidName)
	}
	for _, n := range names {
		if err := dblock.ValidateName(n); err != nil {
			return fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
		}
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	h.spMu.Lock()
	defer h.spMu.Unlock()

	lk.mu.Lock()
	if h.ended || h.lost != nil {
		lk.mu.Unlock()
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, dblock.ErrReleased)
	}
	var add []string
	for _, n := range names {
		if slices.Contains(h.names, n) || slices.Contains(add, n) {
			continue
		}
		if o, ok := lk.holds[holdKey{n, h.owner}]; ok && o != h && !o.ended && o.lost == nil {
			lk.mu.Unlock()
			return fmt.Errorf("pessimistic: %s %q: %w: %q is already held by this owner in another transaction (it would wait for itself)",
				op, label, dblock.ErrInvalidOption, n)
		}
		add = append(add, n)
	}
	withTokens := h.tokens != nil
	lk.mu.Unlock()
	if len(add) == 0 {
		return nil
	}
	slices.Sort(add)
	if withTokens && kind == store.SQLite {
		return fmt.Errorf("pessimistic: %s %q: %w: on SQLite a lock that asked for tokens cannot take more names; take them all at once (AcquireMany)",
			op, label, dblock.ErrInvalidOption)
	}
	if kind != store.SQLite && !lk.sideWanted() {
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, errNoSide)
	}
	wait := lk.lockWait
	if try {
		wait = 0
	}
	err := lk.lockInTx(ctx, h, add, try, wait)
	if err != nil {
		if errors.Is(err, dblock.ErrNotAcquired) {
			return fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
		}
		return fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	var tokens map[string]dblock.Token
	if withTokens {
		if tokens, err = lk.bumpTokens(ctx, h, add); err != nil {
			lk.txTrouble(h, err)
			return fmt.Errorf("pessimistic: %s %q: token: %w", op, label, err)
		}
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if h.ended || h.lost != nil {
		return fmt.Errorf("pessimistic: %s %q: %w: the hold ended meanwhile", op, label, dblock.ErrNotAcquired)
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

// lockInTx locks the rows of names (sorted, none held by h) in h's
// transaction, creating missing rows, and refuses names held by a lease. The
// wait is bounded server-side (lock timeout) by ctx's deadline and wait
// (zero: none), and cancelled from the Locker's own connection when ctx ends
// first: a statement cut short by its context would close the connection,
// and with it the whole hold.
func (l *Locker) lockInTx(ctx context.Context, h *hold, names []string, try bool, wait time.Duration) error {
	db := l.db
	kind := db.Dialect.Kind()
	sctx := context.WithoutCancel(ctx)
	ensure := func(missing []string) error {
		for _, n := range missing {
			var err error
			if kind == store.SQLite {
				err = db.EnsureRow(sctx, h.tx, n)
			} else {
				err = l.withSide(ctx, true, func(q store.Querier) error { return db.EnsureRow(ctx, q, n) })
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	// PostgreSQL aborts the transaction on any failed statement (a NOWAIT
	// or lock timeout refusal, a deadlock): a savepoint keeps the hold.
	// MySQL keeps the transaction after a refused lock (only a deadlock
	// rolls it back, savepoint or not), and keeps row locks taken after a
	// savepoint even when rolled back to it: so it checks first, without
	// locking, that the rows exist (a locking read of a missing key would
	// lock its gap, which the insert from another connection would wait
	// for) and that no lease holds them.
	const sp = "dblock_lock"
	if kind == store.MySQL {
		if err := ensure(names); err != nil {
			return err
		}
		for _, n := range names {
			var holder store.Holder
			err := l.withSide(ctx, true, func(q store.Querier) error {
				var err error
				holder, err = db.LeaseHolder(ctx, q, n)
				return err
			})
			if err != nil {
				return err
			}
			if holder.Held() {
				return holder.HeldError(n, nil)
			}
		}
	}
	if kind == store.Postgres {
		if err := db.Savepoint(sctx, h.tx, sp); err != nil {
			l.txTrouble(h, err)
			return err
		}
	}
	undo := func(cause error) error {
		if kind != store.Postgres {
			return cause
		}
		if err := db.RollbackToSavepoint(sctx, h.tx, sp); err != nil {
			l.txTrouble(h, err)
			return errjoin.Join(cause, err)
		}
		if err := db.ReleaseSavepoint(sctx, h.tx, sp); err != nil {
			l.txTrouble(h, err)
			return errjoin.Join(cause, err)
		}
		return cause
	}
	for range 5 {
		p := store.RowLockParams{NoWait: try, IdleTimeout: h.ttl, Wait: wait}
		var cancelled chan struct{}
		stop := func() bool { return true }
		if !try && kind != store.SQLite && ctx.Done() != nil {
			stop = l.cancelOnDone(ctx, h.session.ID, &cancelled, names)
		}
		found, _, err := l.lockStmtWait(sctx, ctx, h, names, p)
		if !stop() {
			<-cancelled
			if err == nil {
				err = fmt.Errorf("%w: %w", dblock.ErrNotAcquired, context.Cause(ctx))
			}
		}
		if err != nil {
			if ctx.Err() != nil && !errors.Is(err, dblock.ErrDeadlock) {
				err = fmt.Errorf("%w: %w", dblock.ErrNotAcquired, errjoin.Join(context.Cause(ctx), err))
			}
			if kind == store.MySQL {
				l.txTrouble(h, err)
				if errors.Is(err, dblock.ErrDeadlock) {
					err = fmt.Errorf("%w: %w", err, h.lostErr())
				}
			} else if isConnErr(err) {
				l.txTrouble(h, err)
			}
			return undo(err)
		}
		var missing []string
		for _, n := range names {
			holder, ok := found[n]
			if !ok {
				missing = append(missing, n)
				continue
			}
			if holder.Held() {
				return undo(holder.HeldError(n, nil))
			}
		}
		if len(missing) == 0 {
			if kind == store.Postgres {
				if err := db.ReleaseSavepoint(sctx, h.tx, sp); err != nil {
					l.txTrouble(h, err)
					return err
				}
			}
			return nil
		}
		// Missing rows: PostgreSQL has no gap locks, so the rows locked
		// so far stay locked while the others are created.
		if err := ensure(missing); err != nil {
			return undo(err)
		}
	}
	return undo(errors.New("lock rows keep disappearing"))
}

// lockStmtWait is lockStmt with the server-side bound taken from waitCtx's
// deadline as well as p.Wait, the statement itself running on sctx (which
// is not cancelled).
func (l *Locker) lockStmtWait(sctx, waitCtx context.Context, h *hold, names []string, p store.RowLockParams) (map[string]store.Holder, store.SessionRef, error) {
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
