package optimistic

import (
	"context"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// Reservations across processes. A Locker lines up its own waiters on a
// name and wakes the next one at once when it releases (gates); waiters in
// other processes only learn of the release by a notification (PostgreSQL)
// or their next poll. Left at that, the releasing process's next waiter
// wins the name nearly every time on a database without notifications.
//
// So the head of a line that was refused keeps the name for itself once it
// is freed: a reservation on the row (store.ReserveLease), which the
// acquire statements honour, naming its owner and when it began to wait by
// the database clock (its first refusal). A head that began waiting earlier
// takes the reservation over when it next looks, so across processes the
// longest waiter that asks is served next. The reserver looks more often
// (from reserverFirst, doubling up to reserverPoll), sends the cheaper take
// of a free name once a look or an announcement finds the name free
// (store.AcquireParams.FreeSeen), and renews the reservation when half of
// it is left; its take clears it, and a wait that ends without the name
// gives it up. A reserver that crashes keeps the name free but unclaimed
// until the reservation lapses (reserveFor). A waiter that last saw the
// name kept for another reads the row when it wakes (readFirst) instead
// of sending the acquire statement, which would be refused.
//
// Where releases are announced (PostgreSQL), a release that frees a name
// kept for another owner's waiter is announced to that owner alone, and
// the releasing Locker leaves its own next waiter asleep (lineRows tells
// gates.released the owner, and gates.kick reads it): only the reserver
// wakes, and takes. A release
// that the Locker's own line waits for is not announced at all (lineRows):
// its next waiter takes the name, and the other processes' waiters would
// only be refused; they reserve the name when they next look, and a
// reservation of a name found free announces it to the reserver.

// reserveFor is how long a reservation lasts unless renewed, by the
// database clock: four of the reserver's longest sleeps, at least a second.
func (l *Locker) reserveFor() time.Duration {
	return max(time.Second, 4*l.reserverPoll())
}

// reserverFirst is the first sleep of a call that has just reserved the
// name, doubled after each look up to reserverPoll. Where a release is
// announced (PostgreSQL) that is the usual first backoff step. Else the
// reserver polls for the release, and a tenth of it (at least 500 µs): a
// release across processes waits for the reserver's next look, and a
// lock held briefly then changes hands within a look or two of a read of
// one row, while one held long costs the reserver only the few looks
// more it takes to reach the cap (on MariaDB, 4 processes taking turns on
// one name: 0.61× a hand-written hand-off that polls every millisecond
// with the first step at PollMin, 0.84–0.94× with this alone in quick
// runs; bench/README.md).
func (l *Locker) reserverFirst() time.Duration {
	if l.hub != nil {
		return l.cfg.PollMin
	}
	return min(l.cfg.PollMin, max(l.cfg.PollMin/10, 500*time.Microsecond))
}

// reserverPoll caps the sleep of a call holding a reservation. Where a
// release is announced (PostgreSQL), it only needs to renew in time; else
// it polls for the release, at up to four of the first backoff steps.
func (l *Locker) reserverPoll() time.Duration {
	if l.hub != nil {
		return min(l.cfg.PollMax, 250*time.Millisecond)
	}
	return min(l.cfg.PollMax, 4*l.cfg.PollMin)
}

// keptPoll caps the sleep of a waiting call while the name is reserved:
// the reserver's (reserved) is reserverPoll. Where nothing announces
// releases, a waiter kept out by another's reservation looks twice as
// often (at most 2 PollMin): once the reserver has taken the name, nobody
// reserves it until such a waiter looks, and meanwhile the taker's own
// waiters pass it among themselves (on MariaDB, 4 processes × 2
// goroutines on one name: per-process min/max 0.77–0.84 with reserverPoll,
// 0.85–0.94 with this, each look a read of one row).
func (l *Locker) keptPoll(reserved bool) time.Duration {
	if reserved || l.hub != nil {
		return l.reserverPoll()
	}
	return min(l.reserverPoll(), 2*l.cfg.PollMin)
}

// keep runs after a waiting call saw the name held or kept from it (h): it
// notes when the call began to wait, and reserves the name for the call
// unless the call holds the reservation with more than half of it left or
// a waiter that began no later holds it. A name held through this Locker
// is not reserved against: its release wakes the call at once (a kick
// already pending says that it did). A failed reservation is not an
// error: the call waits as it would without one.
func (a *acquisition) keep(h store.Holder) {
	if !a.wait || !h.Exists || h.Now.IsZero() || h.Owner == a.o.Owner && h.Held() {
		return
	}
	if a.since.IsZero() {
		a.since = h.Now
	}
	if h.Owner != "" && h.Held() && a.l.keeper.Holds(a.name, h.Owner) {
		return
	}
	if len(a.kickCh) > 0 {
		// A release through this Locker kicked the call since h was read
		// (the kick comes before the Keeper forgets the hold): h may be
		// that hold, now released, and a reservation would keep a free
		// name. The kick ends the call's sleep at once, and it asks again.
		return
	}
	switch {
	case h.Next.Owner == a.o.Owner && h.Next.Until.Sub(h.Now) > a.l.reserveFor()/2:
		a.reserved = true
		return
	case h.ReservedFor(a.o.Owner) && !h.Next.Since.After(a.since):
		a.reserved = false
		return
	}
	ctx, cancel := a.l.db.StatementContext(context.WithoutCancel(a.ctx), a.l.cfg.StatementTimeout)
	ok, err := a.l.db.ReserveLease(ctx, a.name, a.o.Owner, a.since, a.l.reserveFor())
	cancel()
	if err != nil {
		return
	}
	if ok && !a.reserved {
		a.backoff = a.l.reserverFirst()
	}
	a.reserved = ok
}

// unreserve gives up the call's reservation when its wait ended without
// the name (a take clears it by itself).
func (a *acquisition) unreserve() {
	if !a.reserved {
		return
	}
	a.reserved = false
	ctx, cancel := a.l.db.StatementContext(context.WithoutCancel(a.ctx), a.l.cfg.StatementTimeout)
	defer cancel()
	_, _ = a.l.db.UnreserveLease(ctx, a.name, a.o.Owner)
}
