package pessimistic

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

// txTrouble looks at the error of a statement dblock ran on h's transaction:
// on MySQL, a deadlock or a missing savepoint means that the server rolled
// the whole transaction back, so the lock is gone; a broken connection loses
// it everywhere.
func (l *Locker) txTrouble(h *hold, err error) {
	switch {
	case l.caps.TxEndsOnDeadlock && (errors.Is(err, dblock.ErrDeadlock) || store.SavepointGone(err)):
		l.abort(h, fmt.Errorf("%w: %w", ErrTxEnded, err))
	case isConnErr(err):
		l.abort(h, dblock.ErrConnLost)
	}
}

// abort marks h lost and ends its transaction at once in database/sql
// (called on the goroutine that saw the loss, so no statement of its own is
// in flight): later statements on Tx fail with sql.ErrTxDone instead of
// running outside the transaction (MySQL runs a deadlock victim's next
// statements in autocommit mode).
func (l *Locker) abort(h *hold, reason error) {
	l.loseThen(h, reason, false, func() { _ = h.tx.Rollback() })
}

// lose marks every handle of h lost with reason and reports whether this
// call did (false if h was already lost, or ended and !ended).
func (l *Locker) lose(h *hold, reason error, ended bool) bool {
	return l.loseThen(h, reason, ended, nil)
}

// loseThen is lose, running before (when not nil) once h is marked lost and
// before anyone is told.
func (l *Locker) loseThen(h *hold, reason error, ended bool, before func()) bool {
	l.mu.Lock()
	if h.lost != nil || h.ended && !ended {
		l.mu.Unlock()
		return false
	}
	h.lost = reason
	handles := slices.Clone(h.handles)
	l.mu.Unlock()
	if before != nil {
		before()
	}
	l.openGates(h)
	l.recordLoss(h, reason)
	for _, lease := range handles {
		if lease.ctl.Lose(reason) {
			l.log.Warn("pessimistic: lock lost", "lock_key", lease.Name(), "owner", lease.Owner(),
				"token", int64(lease.Token()), "error", reason)
			l.events.Lost(lease.Name(), lease.Owner(), lease.Token(), lease.Err(), time.Since(h.start))
		}
	}
	return true
}

// endBounded ends h's transaction (see end) within ctx: when ctx ends
// first, the transaction is interrupted (its connection closed; on MySQL its
// session killed from the Locker's connection), and the error says that the
// outcome is unknown; the connection is destroyed once the driver returns.
func (l *Locker) endBounded(ctx context.Context, h *hold, rollback bool) error {
	if ctx.Done() == nil {
		return h.end(ctx, rollback)
	}
	if l.caps.TxEndCancellable || h.interruptConn != nil {
		// pgx ends a COMMIT or ROLLBACK whose context (the transaction's)
		// is cancelled at once, network or not, and a connection with
		// interruptConn fails as its socket is closed: no goroutine is
		// needed to give up on it.
		interrupted := make(chan struct{})
		stop := store.AfterFunc(ctx, func() {
			// interrupt first: on MySQL it starts the session's kill,
			// counted in l.bg, which must be counted before this call
			// returns and a Close can wait for l.bg.
			l.interrupt(h)
			close(interrupted)
		})
		err := h.end(ctx, rollback)
		if stop() {
			return err
		}
		<-interrupted
		switch {
		case err == nil || errors.Is(err, dblock.ErrUnavailable):
			return err
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || isConnErr(err):
			// Given up as ctx ended: the server may or may not have done it.
			return fmt.Errorf("%w: %s interrupted as ctx ended: outcome unknown: %w (%w)",
				dblock.ErrUnavailable, endVerb(rollback), err, context.Cause(ctx))
		}
		return fmt.Errorf("%w: %w", err, context.Cause(ctx)) // An answer (a rollback, say) came first.
	}
	done := make(chan error, 1)
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		done <- h.end(ctx, rollback)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	l.interrupt(h)
	t := time.NewTimer(interruptGrace)
	defer t.Stop()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		return fmt.Errorf("%w: %w", err, context.Cause(ctx))
	case <-t.C:
		return fmt.Errorf("%w: %s did not finish before ctx ended (the connection is being closed): outcome unknown: %w",
			dblock.ErrUnavailable, endVerb(rollback), context.Cause(ctx))
	}
}

func endVerb(rollback bool) string {
	if rollback {
		return "rollback"
	}
	return "commit"
}

// interruptGrace is how long endBounded waits, after interrupting, for the
// driver to return.
const interruptGrace = 100 * time.Millisecond

// interrupt makes the statements under way on h's connection fail: the
// transaction's context is cancelled (pgx closes the connection of a COMMIT
// or ROLLBACK in flight; database/sql rolls back), and on MySQL, whose
// driver cannot be interrupted so, the connection's socket is closed where
// dblock dialed it (interruptConn) and the session is killed from the
// Locker's own connection, unless the server restarted since the lock was
// taken (a session under that id would be someone else's).
func (l *Locker) interrupt(h *hold) {
	h.txCancel()
	h.interruptStatement()
	if !l.caps.LockWaitInSeconds || h.session.ID == 0 {
		return
	}
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		err := l.withSide(ctx, false, func(q store.Querier) error {
			inc, err := l.sideIncarnation(ctx, q)
			if err != nil || !l.onIncarnation(h, inc) {
				return err
			}
			return l.db.KillSession(ctx, q, h.session.ID)
		})
		if err != nil {
			l.log.Warn("pessimistic: kill an interrupted session", "session", h.session.ID, "error", err)
		}
	}()
}

// end finishes the transaction and gives the connection back to the pool,
// or destroys it when the transaction could not be ended cleanly. On MySQL
// it first checks that the server still has the transaction open (see
// store.EndHold): if not, it does not pretend to commit, and returns an
// error wrapping ErrTxEnded.
func (h *hold) end(ctx context.Context, rollback bool) (err error) {
	db := h.l.db
	defer h.txCancel()
	verb := endVerb(rollback)
	h.l.mu.Lock()
	lost := h.lost
	h.l.mu.Unlock()
	// A checked commit makes the check itself (MariaDB, on a pool Open
	// opened), and such a pool keeps the hold's bound: EndHold has nothing
	// to do.
	checked := !rollback && h.l.checkedCommit
	if lost == nil && !checked {
		// No deadline of its own: a cancellable context costs the MySQL
		// driver a hand-off to its watcher goroutine per statement, and the
		// caller's bound (endBounded) interrupts a statement that hangs.
		open, eerr := db.EndHold(context.WithoutCancel(ctx), h.tx, !rollback)
		if eerr != nil || !open {
			_ = h.tx.Rollback()
			h.giveConn(true)
			if eerr != nil {
				return fmt.Errorf("%s: %w", verb, eerr)
			}
			if !rollback {
				verb += " (not sent)"
			}
			return fmt.Errorf("%s: %w: statements run on Tx after that ran outside it, each committed on its own", verb, ErrTxEnded)
		}
	}
	if rollback {
		err = h.tx.Rollback()
	} else {
		err = h.tx.Commit()
	}
	if checked && store.TxEndedAtCommit(err) {
		h.giveConn(true)
		return fmt.Errorf("%s (not sent): %w: statements run on Tx after that ran outside it, each committed on its own", verb, ErrTxEnded)
	}
	if lost != nil && errors.Is(err, sql.ErrTxDone) {
		err = nil // Rolled back already when the loss was found.
	}
	if !rollback && store.CommitRolledBack(err) {
		// PostgreSQL rolled back a transaction that a failed statement
		// had aborted; the connection is fine.
		err = fmt.Errorf("%w: a statement had failed and aborted the transaction: %w", ErrRolledBack, err)
		h.giveConn(!h.restoreBusy(ctx))
		return fmt.Errorf("%s: %w", verb, err)
	}
	err = db.Classify(err)
	destroy := err != nil || lost != nil
	if !destroy {
		destroy = !h.restoreBusy(ctx)
	}
	h.giveConn(destroy)
	if err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	return nil
}

// restoreBusy puts back the SQLite busy timeout changed for the attempt
// (within cleanupTimeout, whatever ctx's state), reporting whether the
// connection is fit for the pool.
func (h *hold) restoreBusy(ctx context.Context) bool {
	if h.prevBusy < 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, err := h.l.db.SQLiteBusyTimeout(ctx, h.conn, h.prevBusy)
	return err == nil
}

// closeConn returns conn to the pool, or destroys it (database/sql discards a
// connection whose Raw callback reports driver.ErrBadConn) so that a session
// that may still hold a lock never goes back to the pool.
func closeConn(conn *sqlx.Conn, destroy bool) {
	if destroy {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
}

func isConnErr(err error) bool {
	return errors.Is(err, dblock.ErrUnavailable) || errors.Is(err, dblock.ErrConnLost) ||
		errors.Is(err, driver.ErrBadConn)
}
