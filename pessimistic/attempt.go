package pessimistic

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

// deadConnRetries bounds the attempts one acquisition makes again on
// another connection when the pool handed it a dead one.
const deadConnRetries = 3

// errRetry asks the acquire loop to try again at once (a row was missing).
var errRetry = errors.New("retry")

// errTokenStale asks the acquire loop to try again at once: on SQLite a
// token issued before the lock was overtaken by another acquisition (the
// row's version reached it, or a later token was issued meanwhile).
var errTokenStale = errors.New("token overtaken")

// errCreateBusy asks the acquire loop to try again after a backoff: creating
// a missing row met a lock held by another transaction (MariaDB: the fencing
// floor, or the gap of the missing key).
var errCreateBusy = errors.New("creating the lock row met a lock")

// lock runs acquisition attempts until one succeeds, the wait ends, or an
// error that waiting cannot fix occurs.
func (l *Locker) lock(callCtx, ctx, waitCtx context.Context, req *request) (*hold, error) {
	r := &retries{l: l, callCtx: callCtx, ctx: ctx, waitCtx: waitCtx, op: req.op, label: req.label, o: req.o, try: req.try, backoff: backoffMin}
	for attempt := 1; ; attempt++ {
		if err := waitCtx.Err(); err != nil {
			return nil, r.notAcquired(nil, context.Cause(waitCtx))
		}
		h, holder, err := l.attempt(callCtx, ctx, waitCtx, req)
		switch {
		case err == nil && holder == nil:
			return h, nil
		case err == nil:
			err = r.waitHolder(holder, attempt)
		default:
			err = r.again(err, attempt)
		}
		if err != nil {
			return nil, err
		}
	}
}

// retries is the state of lock's loop: how often each kind of failure came
// back, and the backoff.
type retries struct {
	l                     *Locker
	callCtx, ctx, waitCtx context.Context
	op, label             string
	o                     mode.Options
	try                   bool

	backoff              time.Duration
	missing, stale, dead int
	busySince            time.Time // A try's first errCreateBusy.
}

func (r *retries) notAcquired(holder *store.Holder, cause error) error {
	return notAcquiredErr(r.op, r.label, holder, cause)
}

// again decides after a failed attempt: nil to try again, else the error
// that ends the acquisition.
func (r *retries) again(err error, attempt int) error {
	switch {
	case errors.Is(err, errTokenStale):
		if r.stale++; r.stale > 1000 {
			return fmt.Errorf("pessimistic: %s %q: fencing token overtaken %d times", r.op, r.label, r.stale)
		}
		return nil
	case errors.Is(err, driver.ErrBadConn) && r.dead < deadConnRetries:
		// A pooled connection the server had closed (after an idle
		// timeout, say): the driver sent nothing on it, and the attempt
		// destroyed it; another connection is tried.
		r.dead++
		return nil
	case errors.Is(err, errRetry):
		if r.missing++; r.missing > 5 {
			return fmt.Errorf("pessimistic: %s %q: lock row keeps disappearing", r.op, r.label)
		}
		return nil
	case errors.Is(err, errCreateBusy):
		return r.createBusy(err)
	case errors.Is(err, dblock.ErrNotAcquired):
		return r.refused(err, attempt)
	}
	return r.failed(err)
}

// createBusy: another transaction briefly holds what the insert needs (a
// gap of the missing key, the fencing floor while a reaper raises it); a
// try retries for up to createBusyTryMax, as a lease acquisition waits for
// a lock on a missing name's key, a wait backs off like for a lease holder.
func (r *retries) createBusy(err error) error {
	d := r.next()
	if r.try {
		if r.busySince.IsZero() {
			r.busySince = time.Now()
		}
		left := createBusyTryMax - time.Since(r.busySince)
		if left <= 0 {
			return r.notAcquired(nil, err)
		}
		d = min(d, left)
	}
	if !r.sleep(d) {
		return r.notAcquired(nil, errjoin.Join(err, context.Cause(r.waitCtx)))
	}
	return nil
}

// createBusyTryMax bounds a try's retries of a row creation that met a lock
// (a reaper's batch under load holds its locks for a few hundred
// milliseconds; three quick retries once all met the same batch).
const createBusyTryMax = 500 * time.Millisecond

// refused: the database's wait ended without the lock.
func (r *retries) refused(err error, attempt int) error {
	if !r.try {
		settle(r.waitCtx)
	}
	if r.waitCtx.Err() != nil {
		return r.notAcquired(nil, errjoin.Join(err, context.Cause(r.waitCtx)))
	}
	if r.try || !r.l.caps.LockWaitResumes {
		// A try, or the database's own wait ended at the bound.
		return r.notAcquired(nil, err)
	}
	r.l.log.Debug("pessimistic: still waiting", "lock_key", r.label, "owner", r.o.Owner, "attempt", attempt)
	return nil
}

// failed reads any other error: the end of the wait or of the caller's
// context makes it a refusal.
func (r *retries) failed(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		// A dial or statement cut at waitCtx's deadline can return a
		// moment before waitCtx reports it.
		settle(r.waitCtx)
	}
	if r.waitCtx.Err() != nil && r.ctx.Err() == nil {
		// The client stopped the wait at its bound (MySQL bounds
		// server-side in whole seconds only).
		return r.notAcquired(nil, context.Cause(r.waitCtx))
	}
	// ctx merges the caller's context with Close's and may learn of a
	// cancellation a moment after callCtx; either ends the wait.
	for _, c := range []context.Context{r.ctx, r.callCtx} {
		if c.Err() != nil {
			return fmt.Errorf("pessimistic: %s %q: %w: %w", r.op, r.label, dblock.ErrNotAcquired, errjoin.Join(context.Cause(c), err))
		}
	}
	return fmt.Errorf("pessimistic: %s %q: %w", r.op, r.label, err)
}

// waitHolder: a lease holder stands in the way; fail at once, or wait for
// it to release or expire.
func (r *retries) waitHolder(holder *store.Holder, attempt int) error {
	if r.try {
		return r.notAcquired(holder, nil)
	}
	sleep := r.next()
	if holder.ExpiresAt.After(holder.Now) {
		sleep = backoff.UntilExpiry(sleep, holder.ExpiresAt, holder.Now)
	}
	r.l.log.Debug("pessimistic: waiting for lease holder", "lock_key", r.label, "owner", r.o.Owner, "attempt", attempt)
	if !r.sleep(sleep) {
		return r.notAcquired(holder, context.Cause(r.waitCtx))
	}
	return nil
}

// next returns the jittered backoff and doubles it, up to backoffMax.
func (r *retries) next() time.Duration {
	d := backoff.JitterUp(r.backoff)
	r.backoff = min(2*r.backoff, backoffMax)
	return d
}

// sleep waits d, or until the wait ends (false).
func (r *retries) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.waitCtx.Done():
		return false
	}
}

// settle waits for ctx's deadline when it is near: the server's lock
// timeout was set to end with it, in whole milliseconds and counted from a
// moment the client only estimates, and may end earlier (on a loaded
// machine, by more than a hair), so that the error then reports the
// deadline as its cause.
// settleWindow is how near the deadline must be for settle to wait for it.
const settleWindow = time.Second

func settle(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	left := time.Until(dl)
	if left > settleWindow {
		return
	}
	// Wait for ctx itself to report the deadline: a timer of our own can
	// fire before the context's (on a loaded machine, well before). The
	// guard only bounds the wait if ctx were never to end.
	t := time.NewTimer(left + settleWindow)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// attempt makes one try: it returns the hold, or the lease holder that
// stands in the way, or an error (errRetry when a row had to be created,
// errCreateBusy when creating it met a lock).
//
// ctx is the caller's context with Close's cancellation, waitCtx adds the
// wait bound; statements that do not wait run on callCtx.
func (l *Locker) attempt(callCtx, ctx, waitCtx context.Context, r *request) (*hold, *store.Holder, error) {
	names, ttl, try := r.names, r.ttl, r.try
	conn, err := l.poolConn(waitCtx, try)
	if err != nil {
		return nil, nil, err
	}
	a := &attemptRun{l: l, callCtx: callCtx, ctx: ctx, waitCtx: waitCtx, names: names, o: r.o, try: try,
		h: &hold{l: l, names: names, owner: r.o.Owner, conn: conn, ttl: ttl, prevBusy: -1, start: time.Now(), shared: r.shared}}
	if err := a.setBusy(); err != nil {
		closeConn(conn, true)
		return nil, nil, err
	}
	if err := a.preIssue(); err != nil {
		return nil, nil, a.giveUp(err)
	}
	if l.hooks4test.beforeBegin != nil {
		l.hooks4test.beforeBegin(names)
	}
	if err := a.begin(); err != nil {
		return nil, nil, a.giveUp(err)
	}
	if !l.caps.RowLocks {
		// A write takes the database's write lock, so the lock holds
		// whatever mode the pool begins transactions in.
		if err := l.db.SQLiteWriteLock(callCtx, a.h.tx); err != nil {
			return nil, nil, a.fail(err)
		}
	}
	found, session, err := l.lockRows(callCtx, ctx, waitCtx, a.h, names, ttl, try, a.begin)
	if err != nil {
		return nil, nil, a.fail(err)
	}
	if holder, err := a.check(found); holder != nil || err != nil {
		return nil, holder, err
	}
	a.h.session = session
	for _, row := range found {
		if row.Holder.Now.After(a.h.lockedAt) {
			a.h.lockedAt = row.Holder.Now // Held from the last row's lock on.
		}
	}
	if err := a.seal(); err != nil {
		return nil, nil, a.fail(err)
	}
	if l.caps.RowLocks && !l.caps.TxEndCancellable {
		a.h.interruptConn = store.InterruptOf(a.h.conn.Conn)
	}
	return a.h, nil, nil
}

// attemptRun is one attempt's state. Its steps run in this order: setBusy,
// preIssue, begin, (the row locks), check, seal. A step that fails before
// the transaction gives the connection back (giveUp); after, the
// transaction is rolled back first (fail).
type attemptRun struct {
	l                     *Locker
	callCtx, ctx, waitCtx context.Context
	names                 []string
	o                     mode.Options
	try                   bool
	h                     *hold

	// On SQLite, the tokens issued before the lock (see preIssue).
	preIssued  map[string]dblock.Token
	lastIssued dblock.Token
}

// setBusy bounds, on SQLite, how long the attempt's statements wait for the
// database's write lock: an unbounded wait keeps the pool's busy timeout and
// retries; a try or a bounded wait sets it for this transaction.
func (a *attemptRun) setBusy() error {
	if a.l.caps.RowLocks {
		return nil
	}
	dl, bounded := a.waitCtx.Deadline()
	if !a.try && !bounded {
		return nil
	}
	busy := time.Duration(0)
	if !a.try {
		busy = max(min(SQLiteWaitChunk, time.Until(dl)), time.Millisecond)
	}
	var err error
	a.h.prevBusy, err = a.l.db.SQLiteBusyTimeout(a.callCtx, a.h.conn, busy)
	return err
}

// preIssue issues the tokens first on SQLite, where the lock is the
// database's write transaction and nothing can make a token durable while it
// is held: each is committed on its own on this connection (whose busy
// timeout is the attempt's: a try fails at once when another writer holds
// the database). seal then checks under the lock that no one got past them:
// the row's version is below them and no token was issued after them
// (SetIssuedToken). The second check matters: a process that issued a later
// token while this one waited may have got the lock first and died holding
// it, its transaction (and the row's version) rolled back, yet it had been
// handed its token; this one's smaller token would come after it. Then the
// attempt gives the lock up and starts again with new tokens
// (errTokenStale), so that every token handed out was committed first. A
// token taken inside the write transaction instead would be rolled back
// with a holder that died, and could be handed out again, or come after an
// earlier-issued smaller one.
func (a *attemptRun) preIssue() error {
	if a.l.caps.RowLocks || !a.o.Token {
		return nil
	}
	a.preIssued = make(map[string]dblock.Token, len(a.names))
	for _, n := range a.names {
		t, err := a.l.db.IssueToken(a.waitCtx, a.h.conn, n)
		if err != nil {
			return err
		}
		a.preIssued[n] = t
		a.lastIssued = max(a.lastIssued, t)
	}
	return nil
}

// begin starts the locking transaction. It outlives the call; its context
// is cancelled only to poison a lost hold (see hold.txCancel).
func (a *attemptRun) begin() error {
	var txCtx context.Context
	txCtx, a.h.txCancel = context.WithCancel(context.WithoutCancel(a.callCtx))
	if a.l.checkedCommit {
		txCtx = store.WithCheckedCommit(txCtx)
	}
	a.h.deferred = a.l.defersBegin()
	if a.h.deferred {
		txCtx = store.WithDeferredBegin(txCtx)
	}
	tx, err := a.h.conn.BeginTxx(txCtx, nil)
	if err != nil {
		a.h.txCancel()
		return a.l.db.Classify(err)
	}
	a.h.tx = tx
	return nil
}

// defersBegin reports whether a hold begun now sends its BEGIN with its
// lock statement (store.DefersBegin). On PostgreSQL it always does: the
// two go in one round trip, as a batch. On MariaDB the deferred BEGIN is a
// call of dblock_lock_begin (store.BeginsInCall), which saves the round
// trip of START TRANSACTION but costs the server more work than the two
// statements it replaces. Measured on 2 cores, server and client on one
// machine (holds on a name each, against the hand-written BEGIN / SELECT
// ... FOR UPDATE / COMMIT): with the call 1.02×, 0.85× and 0.68× its rate
// at 1, 8 and 32 goroutines, the server's CPU a hold 210, 136 and 122 µs;
// without it 0.92×, 1.19× and 0.88×, and 209, 96 and 92 µs. Two goroutines
// already ran faster without it. So a hold begins with the call only while
// its acquisition is the Locker's only one under way and the Locker holds
// nothing else: where holds overlap, the server's work rather than the
// round trip bounds them.
func (l *Locker) defersBegin() bool {
	if !l.deferBegin || !l.beginsInCall {
		return l.deferBegin
	}
	l.mu.Lock()
	alone := len(l.admitted)+len(l.all) <= 1 // This acquisition is counted in admitted.
	l.mu.Unlock()
	return alone
}

// release gives the connection back after an attempt that ended cleanly
// outside a transaction, destroying it if its state cannot be restored.
func (a *attemptRun) release() {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), cleanupTimeout)
	defer cancel()
	closeConn(a.h.conn, !a.h.restoreBusy(rctx))
}

// giveUp ends an attempt outside a transaction: the connection goes back
// to the pool after a refusal, and is destroyed after anything else.
func (a *attemptRun) giveUp(err error) error {
	if errors.Is(err, dblock.ErrNotAcquired) {
		a.release()
	} else {
		closeConn(a.h.conn, true)
	}
	return err
}

// fail rolls back and releases the connection, destroying it unless
// everything ended cleanly; it returns cause.
func (a *attemptRun) fail(cause error) error {
	rerr := a.h.tx.Rollback()
	a.h.txCancel()
	if rerr != nil {
		closeConn(a.h.conn, true)
	} else {
		a.release()
	}
	return cause
}

// check looks at the locked rows: a missing row is created (the attempt
// ends with errRetry), and a live lease holder ends the attempt with that
// holder. Both roll back first.
func (a *attemptRun) check(found lockedRows) (*store.Holder, error) {
	if len(found) < len(a.names) {
		_ = a.fail(nil)
		for _, n := range a.names {
			if _, ok := found.holder(n); ok {
				continue
			}
			if err := a.l.ensureRow(a.callCtx, n); err != nil {
				return nil, err
			}
		}
		return nil, errRetry
	}
	for _, n := range a.names {
		if holder, _ := found.holder(n); holder.Held() && !(a.h.shared && readersOnly(holder)) {
			_ = a.fail(nil)
			in := holder // Declared here, so that only a refusal allocates it.
			return &in, nil
		}
	}
	return nil, nil
}

// seal finishes a held attempt: the fencing tokens (checked, on SQLite,
// as preIssue says; errTokenStale when overtaken), then the server-side
// bound on a frozen holder (MySQL and MariaDB; set inside the lock
// statement on PostgreSQL), set once the lock is held so that a failed
// attempt leaves nothing to restore.
func (a *attemptRun) seal() error {
	h, db := a.h, a.l.db
	switch {
	case a.preIssued != nil:
		for _, n := range a.names {
			ok, err := db.SetIssuedToken(a.callCtx, h.tx, n, a.preIssued[n], a.lastIssued)
			if err != nil {
				return err
			}
			if !ok {
				return errTokenStale
			}
		}
		h.tokens = a.preIssued
	case a.o.Token:
		tokens, err := a.l.bumpTokens(a.callCtx, h, a.names)
		if err != nil {
			return err
		}
		h.tokens = tokens
	}
	return db.SetHoldBound(a.callCtx, h.tx, h.ttl, h.session.Bound)
}

// ensureRow creates name's row (autocommit, outside any lock's transaction)
// on the Locker's own connection when it has one, so it never waits for the
// pool. A refusal for want of a lock (MariaDB: the fencing floor or a gap
// held by another transaction) comes back as errCreateBusy.
func (l *Locker) ensureRow(ctx context.Context, name string) error {
	var err error
	if l.sideWanted() {
		err = l.withSide(ctx, true, func(q store.Querier) error { return l.db.EnsureRow(ctx, q, name) })
	} else {
		err = l.db.EnsureRow(ctx, nil, name)
	}
	if errors.Is(err, dblock.ErrNotAcquired) {
		return fmt.Errorf("%w: %w", errCreateBusy, err)
	}
	return err
}

// lockRows locks the rows of names in h's transaction: NOWAIT first (the
// common, uncontended path is one statement), then, unless trying, a wait in
// the database's queue. On PostgreSQL a failed NOWAIT aborts the
// transaction, so the wait starts a new one (begin).
func (l *Locker) lockRows(callCtx, ctx, waitCtx context.Context, h *hold, names []string, ttl time.Duration, try bool, begin func() error) (lockedRows, store.SessionRef, error) {
	db := l.db
	if !l.caps.RowLocks {
		return l.lockStmt(callCtx, h, names, store.RowLockParams{IdleTimeout: ttl})
	}
	found, session, err := l.lockStmt(callCtx, h, names, store.RowLockParams{NoWait: true, IdleTimeout: ttl, Shared: h.shared, BeginDeferred: h.deferred})
	err = l.endCutOff(callCtx, h, names, err)
	if try || !errors.Is(err, dblock.ErrNotAcquired) {
		return found, session, err
	}
	if l.caps.ErrorAbortsTx {
		if rerr := h.tx.Rollback(); rerr != nil {
			// Nothing is held, but the connection cannot go on (it broke,
			// or pgx closed the transaction its batch began, finding the
			// connection outside one): the caller's rollback fails too and
			// destroys it, and a waiting call tries another (ErrBadConn).
			return nil, store.SessionRef{}, fmt.Errorf("%w: %w: rollback after a refused NOWAIT: %w",
				dblock.ErrUnavailable, driver.ErrBadConn, rerr)
		}
		h.txCancel()
		if err := begin(); err != nil {
			return nil, store.SessionRef{}, err
		}
	}
	// Bound the wait server-side. PostgreSQL's lock_timeout is exact and
	// the query keeps the caller's ctx; MariaDB and MySQL bound in whole
	// seconds, so the client also stops at the exact wait bound.
	qctx := ctx
	if l.caps.LockWaitInSeconds {
		qctx = waitCtx
	}
	var wait time.Duration
	if dl, ok := waitCtx.Deadline(); ok {
		wait = max(time.Until(dl), time.Millisecond)
	}
	p := store.RowLockParams{Wait: wait, IdleTimeout: ttl, Shared: h.shared}
	if !l.caps.LockWaitInSeconds {
		found, session, err = l.lockStmt(qctx, h, names, p)
		return found, session, l.endCutOff(qctx, h, names, err)
	}
	// On MySQL the driver gives up a wait by closing the connection, which
	// the server does not notice while the statement waits: end the
	// server's session too, so its wait is never granted the lock
	// afterwards (see waitEnder).
	idAt := time.Now()
	id, err := db.SessionID(callCtx, h.tx)
	if err != nil {
		return nil, store.SessionRef{}, err
	}
	end := l.endWaitOnDone(qctx, waitSession{id: id, readAt: idAt, discarded: true}, names)
	found, session, err = l.lockStmt(qctx, h, names, p)
	if end.finished() {
		if err == nil {
			// Granted as the wait ended: give it up, since the session was
			// just ended (or its statement cancelled) and the caller's wait
			// is over.
			err = fmt.Errorf("%w: %w", dblock.ErrNotAcquired, context.Cause(qctx))
		}
	}
	return found, session, err
}

// lockStmt runs one lock statement on h's transaction for names.
func (l *Locker) lockStmt(ctx context.Context, h *hold, names []string, p store.RowLockParams) (lockedRows, store.SessionRef, error) {
	if len(names) == 1 {
		p.Conn = h.conn.Conn
		rl, err := l.db.LockRow(ctx, h.tx, names[0], p)
		if err != nil || !rl.Found {
			return nil, store.SessionRef{}, err
		}
		return lockedRows{{Name: names[0], Holder: rl.Holder}}, rl.Session, nil
	}
	rows, session, err := l.db.LockRows(ctx, h.tx, names, p)
	if err != nil {
		return nil, store.SessionRef{}, err
	}
	return sortedRows(rows), session, nil
}

// bumpTokens gives each of names a fencing token, committed on the Locker's
// own connection before it is written into the row in h's transaction.
func (l *Locker) bumpTokens(ctx context.Context, h *hold, names []string) (map[string]dblock.Token, error) {
	if !l.caps.RowLocks {
		return nil, fmt.Errorf("%w: on SQLite a token can only be asked for by the first acquisition of a lock (it is issued before the database is locked)", dblock.ErrInvalidOption)
	}
	tokens := make(map[string]dblock.Token, len(names))
	for _, n := range names {
		var t dblock.Token
		err := l.withSide(ctx, true, func(q store.Querier) error {
			var err error
			t, err = l.db.BumpTokenOn(ctx, h.tx, q, n)
			return err
		})
		if err != nil {
			return nil, err
		}
		tokens[n] = t
	}
	return tokens, nil
}
