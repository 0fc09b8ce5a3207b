package optimistic

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/handoff"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

// acquisition is one Acquire or TryAcquire call on its way to a lease. Its
// steps (joinLine, waitTurn, ask, sleep, leaveLine) share this state.
//
// A call that waits takes a place in the Locker's line for the name; only
// the head of the line asks the database, and a release through this Locker
// wakes the next one at once (kickCh). Other wake-ups: a notification of the
// name (wakeCh, PostgreSQL), the holder's expiry by the database clock, and a
// capped, jittered backoff.
type acquisition struct {
	l       *Locker
	ctx     context.Context // The caller's.
	waitCtx context.Context // ctx bounded by WithWait.
	name    string
	o       mode.Options
	wait    bool
	start   time.Time
	params  store.AcquireParams

	backoff time.Duration
	polled  bool // The last wake-up came from a timer, not a notification.
	res     store.AcquireResult
	// unknown is the error of an acquire whose outcome is not known yet: its
	// connection broke, so it may have committed. No acquire is sent again
	// before a read of the row settles it (else a retry would re-enter a
	// hold taken by the lost one, and a release would leave the name held).
	unknown *pending
	// lastErr is the error of the last attempt, nil once a statement answers:
	// a wait that ends while the database fails says so, not "held".
	lastErr error
	// wanted: this call (a writer of an rwlock) marked the name wanted.
	wanted bool
	// since is when this call began to wait, by the database clock (its
	// first refusal); reserved: it holds the name's reservation, as last
	// seen (see reserve.go).
	since    time.Time
	reserved bool

	// handed is what a release handed this call while it slept (see
	// handoff.go), until run takes it.
	handed *handoff.Result

	w           *waiter         // This call's place in the line, once it waits.
	kickCh      <-chan struct{} // A release through this Locker may have freed the name.
	wakeCh      <-chan struct{} // The name's notifications (PostgreSQL).
	unsubscribe func()
}

// run asks, waits and asks again until the call holds the name, finds it
// held without waiting, or its wait ends.
func (a *acquisition) run() (*dblock.Lease, error) {
	ask := true // Ask the database this round (else wait first).
	if a.wait && a.l.gates.busy(a.name) && !a.l.keeper.Holds(a.name, a.o.Owner) && !a.l.gates.heldBy(a.name, a.o.Owner) {
		// Others of this Locker already wait for the name: queue behind
		// them rather than race them. (An owner that holds the name, here
		// or in another process, re-enters at once; queueing would wait for
		// itself, and so would a write side's owner of a read lock.)
		if err := a.refuseUpgrade(); err != nil {
			return nil, err
		}
		var err error
		if ask, err = a.joinLine(false); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		if r := a.handed; r != nil {
			a.handed = nil
			if lease, err := a.takeHanded(r); lease != nil || err != nil {
				return lease, err
			}
		}
		if lease, err := a.settleUnknown(); lease != nil || err != nil {
			return lease, err
		}
		if a.waitCtx.Err() != nil {
			return nil, a.l.waitEnded(a.name, a.unknown, a.lastErr, context.Cause(a.waitCtx))
		}
		if ask && (a.polled || a.keptFromMe()) && a.unknown == nil {
			ask = a.readFirst()
		}
		if ask && a.unknown == nil {
			lease, again, err := a.ask(attempt)
			if lease != nil || err != nil {
				return lease, err
			}
			if again {
				continue
			}
		}
		ask = true
		if err := a.sleep(); err != nil {
			return nil, err
		}
	}
}

// settleUnknown reads back an acquire whose outcome is unknown: the lease
// if it took the name, and forgets it once settled either way.
func (a *acquisition) settleUnknown() (*dblock.Lease, error) {
	if a.unknown == nil {
		return nil, nil
	}
	lease, settled, err := a.l.settle(a.ctx, a.unknown, a.o, a.start)
	if lease != nil || err != nil {
		return lease, err
	}
	if settled {
		a.unknown = nil
	}
	return nil, nil
}

// readFirst reads the row on a timer wake-up, or on any wake-up while the
// name was kept for another waiter (keptFromMe), and reports whether to
// ask: a read takes no write lock, so pollers never compete with the
// holder's release (SQLite has one writer), cost one round trip while the
// name stays held, and leave a freed name to the waiter it is kept for
// without sending the acquire statement it would refuse.
func (a *acquisition) readFirst() bool {
	rctx, cancel := context.WithTimeout(a.waitCtx, a.l.cfg.StatementTimeout)
	h, err := a.l.db.LeaseHolder(rctx, nil, a.name)
	cancel()
	if err != nil {
		return true
	}
	// (A writer held off by readers asks, which renews its mark.)
	// What the read saw replaces what an announcement said: a name found
	// held since is not sent the take of a free name when this call next
	// asks.
	a.params.FreeSeen = !h.Held()
	heldByOther := h.Held() && h.Owner != a.o.Owner && (a.l.writer == nil || h.Mode != dblock.ModeRead)
	kept := !h.Held() && h.ReservedFor(a.o.Owner)
	if !heldByOther && !kept {
		return true
	}
	a.res, a.lastErr = store.AcquireResult{Holder: h}, nil
	a.l.gates.note(a.name, h)
	a.keep(h)
	// A free name kept for another waiter: ask only if this call has just
	// taken the reservation over (it began waiting earlier).
	return !heldByOther && a.reserved
}

// keptFromMe reports whether the name was last seen kept for another
// waiter (a reservation of another owner, live by the database clock): a
// wake-up then reads the row before it asks, since a release leaves the
// name to that waiter, and a read takes no lock.
func (a *acquisition) keptFromMe() bool {
	return !a.reserved && a.res.Holder.ReservedFor(a.o.Owner)
}

// ask sends the acquire statement: the lease, an error that ends the call,
// or again (ask at once) after the call took or kept its place in line.
func (a *acquisition) ask(attempt int) (*dblock.Lease, bool, error) {
	l := a.l
	reqStart := time.Now()
	stmtCtx, cancel := l.db.StatementContext(context.WithoutCancel(a.ctx), l.cfg.StatementTimeout)
	res, err := l.db.AcquireLease(stmtCtx, nil, a.params)
	cancel()
	a.params.FreeSeen = false
	a.res = res
	switch {
	case err != nil:
		if lease, err := a.failed(err, reqStart, attempt); lease != nil || err != nil {
			return lease, false, err
		}
	case res.Acquired:
		a.tookWanted()
		lease, err := l.newLease(a.name, a.o, res, reqStart, time.Since(a.start))
		return lease, false, err
	default:
		a.lastErr = nil
		if err := a.refusedByReaders(); err != nil {
			return nil, false, err
		}
	}
	if !a.wait {
		return nil, false, fmt.Errorf(a.l.prefix+": acquire %q: %w", a.name, a.res.Holder.HeldError(a.name, nil))
	}
	again, err := a.afterRefusal()
	if err == nil && !again && a.l.gates.isHead(a.name, a.w) {
		// Only the head of the line keeps the name: a reservation held
		// by a waiter behind it would keep the name from the one caller
		// of this Locker that asks.
		a.keep(a.res.Holder)
	}
	return nil, again, err
}

// failed handles an acquire statement that failed: its outcome is settled
// first if unknown (the connection is likely fine again); then the error
// ends the call unless it waits and the error is transient or the
// statement's own timeout (a server that stopped answering: an outcome
// still unknown is settled before the next ask).
func (a *acquisition) failed(err error, reqStart time.Time, attempt int) (*dblock.Lease, error) {
	l := a.l
	if leasekeeper.OutcomeUnknown(err) {
		// The handles are counted after the statement: the same as before
		// it, unless the owner acquires concurrently.
		a.unknown = &pending{name: a.name, owner: a.o.Owner, handles: l.handles(a.name, a.o.Owner), reqStart: reqStart, err: err}
		if lease, serr := a.settleUnknown(); lease != nil || serr != nil {
			return lease, serr
		}
	}
	if a.waitCtx.Err() != nil {
		return nil, l.waitEnded(a.name, a.unknown, err, context.Cause(a.waitCtx))
	}
	if !a.wait || !leasekeeper.WaitRetryable(a.waitCtx, err) {
		if a.unknown != nil {
			return nil, l.unresolved(a.unknown)
		}
		return nil, fmt.Errorf(a.l.prefix+": acquire %q: %w", a.name, err)
	}
	l.logger.LogAttrs(a.ctx, slog.LevelWarn, a.l.prefix+": acquire failed, retrying",
		slog.String("lock_key", a.name), slog.String("owner", a.o.Owner), slog.Int("attempt", attempt), slog.String("error", err.Error()))
	a.res, a.lastErr = store.AcquireResult{}, err
	return nil, nil
}

// afterRefusal keeps a waiting call in line after the name was refused (or
// the statement failed): the first refusal joins the line; a call in line
// notes what it saw and, when it is not the head (it was kicked to re-enter
// for its owner, and the name is not, or no longer, that owner's), waits for
// its turn again. It reports whether to ask at once.
func (a *acquisition) afterRefusal() (bool, error) {
	if a.w == nil {
		return a.joinLine(true)
	}
	a.l.gates.note(a.name, a.res.Holder)
	if !a.l.gates.isHead(a.name, a.w) {
		return a.waitTurn()
	}
	return false, nil
}

// joinLine joins the line and waits for this call's turn. It reports
// whether to ask the database at once: the head asks at once when it has
// not asked yet, or when it just subscribed (a release announced before the
// subscription would be missed); a later head asks at once unless the head
// before it left holding the name (for another owner).
func (a *acquisition) joinLine(asked bool) (bool, error) {
	var head bool
	a.w, head = a.l.gates.join(a.name, a.o.Owner, a.res.Holder)
	a.kickCh = a.w.kick
	subscribed := false
	if a.wakeCh == nil && a.l.hub != nil {
		a.wakeCh, a.unsubscribe = a.l.hub.SubscribeFor(a.waitCtx, a.name, a.o.Owner)
		subscribed = true
	}
	if head {
		return !asked || subscribed, nil
	}
	return a.waitTurn()
}

// waitTurn waits until this call is the head, or is kicked because the
// name was found held by its own owner (it then asks, to re-enter, keeping
// its place in line). A head that left holding the name parks this call
// as it makes it the head (gates.parkNext): a release that follows at once
// may hand it the name, and then it asks at once (run takes the lease).
func (a *acquisition) waitTurn() (bool, error) {
	a.awaitTurn()
	ask, err := a.turnOrEnd()
	if r := a.unpark(); r != nil {
		a.handed = r
		return true, nil
	}
	return ask, err
}

// turnOrEnd is waitTurn's wait.
func (a *acquisition) turnOrEnd() (bool, error) {
	select {
	case free := <-a.w.turn:
		if !free {
			a.res = store.AcquireResult{Holder: a.l.gates.holder(a.name)}
			return a.res.Holder.Owner == a.o.Owner, nil
		}
		return true, nil
	case <-a.w.kick:
		return true, nil
	case <-a.waitCtx.Done():
		return false, a.l.gaveUp(a.name, a.unknown, a.lastErr, context.Cause(a.waitCtx))
	case <-a.l.life.Closing:
		return false, a.l.gaveUp(a.name, a.unknown, a.lastErr, dblock.ErrClosed)
	}
}

// sleep waits for the next round: a notification, a kick, the holder's
// expiry by the database clock, or the backoff, whichever comes first. It
// returns the error of a wait that ended meanwhile.
func (a *acquisition) sleep() error {
	held := a.res.Holder.HeldError(a.name, nil)
	d := jitter(a.backoff)
	a.backoff = min(a.backoff*2, a.l.cfg.PollMax)
	if a.reserved || a.res.Holder.ReservedFor(a.o.Owner) {
		// Holding the reservation, or another Locker's waiter does: look
		// again soon enough to take the name, or (having waited longer)
		// the reservation.
		c := a.l.keptPoll(a.reserved)
		d, a.backoff = min(d, c), min(a.backoff, c)
	}
	// Wake when the lease ends by the database clock, whatever the backoff says.
	d = backoff.UntilExpiry(d, a.res.Holder.ExpiresAt, a.res.Holder.Now)
	timer := time.NewTimer(d)
	defer timer.Stop()
	a.polled = false
	err := a.wakeUp(timer.C, a.park(), held)
	if r := a.unpark(); r != nil {
		// A release handed the name to this call while it slept (even if
		// its wait ended meanwhile: the name is its lease).
		a.handed = r
		return nil
	}
	return err
}

// wakeUp waits for the first wake-up of sleep: the timer, a notification,
// a kick, the end of a claim (handCh, when parked), or the end of the wait.
func (a *acquisition) wakeUp(timer <-chan time.Time, handCh <-chan struct{}, held *dblock.HeldError) error {
	select {
	case <-timer:
		a.polled = true
		return nil
	case <-a.wakeCh:
		// A release was announced: the name is most likely free.
		a.params.FreeSeen = true
		return nil
	case <-a.kickCh:
		return nil
	case <-handCh:
		// A release claimed this call and handed it nothing: the name
		// was released, or kept for another.
		return nil
	case <-a.waitCtx.Done():
		return a.ended(held, context.Cause(a.waitCtx))
	case <-a.l.life.Closing:
		return a.ended(held, dblock.ErrClosed)
	}
}

// ended is the error of a wait that ended (cause) while the call slept.
func (a *acquisition) ended(held *dblock.HeldError, cause error) error {
	if a.unknown != nil || a.lastErr != nil {
		return a.l.waitEnded(a.name, a.unknown, a.lastErr, cause)
	}
	held.Cause = cause
	return fmt.Errorf(a.l.prefix+": acquire %q: %w", a.name, held)
}

// leaveLine leaves the line (naming the lease the call took, if any), the
// name's reservation if the call took nothing, and the name's
// notifications.
func (a *acquisition) leaveLine(lease *dblock.Lease) {
	if lease == nil {
		a.unreserve()
	}
	a.unsubscribe()
	if a.w == nil {
		return
	}
	var taken *store.Holder
	if lease != nil {
		taken = &store.Holder{Exists: true, Owner: a.o.Owner, Mode: a.l.mode, Version: int64(lease.Token())}
	}
	a.l.gates.leave(a.name, a.w, taken)
}
