package fairqueue

import (
	"context"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/store"
)

// A waiter's take of the lock at the head of the queue: where the database
// does it in one statement (PostgreSQL; a procedure's CALL on MariaDB,
// store.TakeHead), that statement; elsewhere a transaction of the lease's
// acquire and the delete of the waiter's row.

// take takes the lock and deletes the waiter's row in one transaction. It
// runs on a context that outlives the caller's, so a wait that ends during
// the take never leaves its outcome unknown. errDead: the row died first.
// An error wrapping dblock.ErrNotAcquired: someone else holds the lock.
func (a *attempt) take(w *waiter) (lease *dblock.Lease, err error) {
	l := a.l
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), l.cfg.ReleaseTimeout)
	defer cancel()
	if l.db.TakesHeadInOne() {
		return a.takeInOne(ctx, w)
	}
	unlock, err := a.lockWrites(true)
	if err != nil {
		return nil, err
	}
	defer func() { unlock() }()
	reqStart := time.Now()
	l.count()
	tx, end, err := l.db.BeginWriteTx(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	rollback := func() {
		l.count()
		_ = tx.Rollback()
	}
	l.count()
	res, err := l.db.AcquireLease(ctx, tx, a.params)
	if err != nil {
		rollback()
		return nil, err
	}
	if !res.Acquired {
		rollback()
		return nil, res.Holder.HeldError(a.name, nil)
	}
	l.count()
	ok, err := l.db.TakeWaiter(ctx, tx, w.id)
	if err != nil {
		rollback()
		return nil, err
	}
	if !ok {
		rollback()
		return nil, errDead
	}
	l.count()
	err = tx.Commit()
	unlock()
	unlock = func() {}
	l.beats.remove(w.id)
	if err != nil {
		// The outcome is unknown: read it back.
		l.count()
		h, herr := l.db.LeaseHolder(ctx, nil, a.name)
		if herr != nil || !h.Held() || h.Owner != a.o.Owner || h.Version != int64(res.Token) {
			return nil, l.db.Classify(err)
		}
	}
	return a.started(res, reqStart)
}

// takeInOne is take where one statement takes the lock and deletes the
// waiter's row (PostgreSQL, MariaDB): one round trip instead of the
// transaction's four. A statement whose outcome is unknown (its connection broke) is
// read back.
func (a *attempt) takeInOne(ctx context.Context, w *waiter) (*dblock.Lease, error) {
	l := a.l
	unlock, err := a.lockWrites(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	reqStart := time.Now()
	l.count()
	res, live, err := l.db.TakeHead(ctx, a.params, w.id)
	switch {
	case err != nil && leasekeeper.OutcomeUnknown(err):
		return a.takenAnyway(w, reqStart, err)
	case err != nil:
		return nil, err
	case !live:
		return nil, errDead
	case !res.Acquired:
		return nil, res.Holder.HeldError(a.name, nil)
	}
	l.beats.remove(w.id)
	return a.started(res, reqStart)
}

// takenAnyway reads back a take whose outcome is unknown, as the
// optimistic mode's settle does: the take happened if the waiter's row is
// gone and the lock row names the owner with one more entry than this
// Locker's leases of it hold. Otherwise (or unreadable, see readTake) the
// cause stands.
func (a *attempt) takenAnyway(w *waiter, reqStart time.Time, cause error) (*dblock.Lease, error) {
	res, taken, err := a.readTake(w)
	if err != nil || !taken {
		return nil, cause
	}
	a.l.beats.remove(w.id)
	return a.started(res, reqStart)
}

// readTake is takenAnyway's read, tried again after a failure (the failure
// that left the take's outcome unknown often broke more than its own
// connection) until it reads an answer: in rounds of leasekeeper.ReadBack
// (each try bounded by a fifth of Config.ReleaseTimeout), for a round at
// least and then for as long as the wait lasts. A waiter that gave up on an
// unreadable take would queue again and, its owner holding the name,
// re-enter it, and the lease it was handed would stand until it expires.
func (a *attempt) readTake(w *waiter) (store.AcquireResult, bool, error) {
	r := takeRead{a: a, w: w}
	for {
		err := leasekeeper.ReadBack(a.ctx, a.l.cfg.ReleaseTimeout, readTakeRetry, readTakeRetryMax, r.once)
		if err == nil || a.stopped(store.Holder{}) != nil {
			return r.res, r.taken, err
		}
		// A round ends early on an error that is not transient: pause
		// as its longest pause would before the next.
		time.Sleep(jitter(readTakeRetryMax))
	}
}

// The pauses between readTake's tries: the first (doubling) and the
// longest.
const (
	readTakeRetry    = 5 * time.Millisecond
	readTakeRetryMax = 250 * time.Millisecond
)

// takeRead holds readTake's last answer.
type takeRead struct {
	a     *attempt
	w     *waiter
	res   store.AcquireResult
	taken bool
}

// once is one try of readTake.
func (r *takeRead) once(ctx context.Context) (err error) {
	r.res, r.taken, err = r.a.readTakeOnce(ctx, r.w)
	return err
}

// readTakeOnce reads the waiter's row and the lock row once.
func (a *attempt) readTakeOnce(ctx context.Context, w *waiter) (store.AcquireResult, bool, error) {
	l := a.l
	l.count()
	s, err := l.db.CheckWaiter(ctx, nil, a.name, w.id)
	if err != nil || s.Live {
		return store.AcquireResult{}, false, err
	}
	l.count()
	h, err := l.db.LeaseHolder(ctx, nil, a.name)
	if err != nil {
		return store.AcquireResult{}, false, err
	}
	token := dblock.Token(h.Version)
	if !h.Held() || h.Owner != a.o.Owner || h.Reentry <= l.keeper.Handles(a.name, a.o.Owner, token) {
		return store.AcquireResult{}, false, nil
	}
	return store.AcquireResult{Acquired: true, Token: token, Reentry: h.Reentry}, true, nil
}
