package optimistic

import (
	"context"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/handoff"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/store"
)

// A release through a Locker hands the name to the head of the Locker's
// line, where the database can do so in the release's statement
// (store.HandLease: PostgreSQL): the releasing call claims the head, the
// statement makes the name the head's lease when the release frees it for
// the head (no reservation of another owner keeps it), and the head wakes
// with its lease, having sent nothing. A contended name then changes hands
// in one statement, not the release's and the take's (the fair queue's
// releases do the same, with its queue's rows: fairqueue/handoff.go).
//
// The head can be claimed only while it sleeps (parked, in sleep); awake,
// it is busy and the release leaves it be (it is kicked, and takes, as
// without hand-offs). A head whose sleep ends while it is claimed waits for
// the claim's outcome before it does anything else, so it never asks,
// reads or leaves while a release may be handing it the name. An rwlock's
// write side does not hand over: its releases go to readers too.

// handSlot is a waiter as its Locker's releases see it, guarded by
// gates.mu.
type handSlot struct {
	handoff.Slot
	inTurn bool                // Waiting for its turn (waitTurn): parkNext may park it.
	params store.AcquireParams // What the call would ask for.
}

// claim returns the head of name's line, claimed, when it sleeps and is
// not owner's; nil otherwise.
func (g *gates) claim(name, owner string) *waiter {
	g.mu.Lock()
	defer g.mu.Unlock()
	ln := g.m[name]
	if ln == nil || len(ln.q) == 0 {
		return nil
	}
	w := ln.q[0]
	if w.owner == owner || !w.hand.Claim() {
		return nil
	}
	return w
}

// finish ends a claim (handoff.Slot.Finish).
func (g *gates) finish(w *waiter, r *handoff.Result) { w.hand.Finish(&g.mu, r) }

// park makes w claimable while it sleeps; p is what it would ask for.
func (g *gates) park(w *waiter, p store.AcquireParams) {
	g.mu.Lock()
	w.hand.params = p
	w.hand.ParkLocked()
	g.mu.Unlock()
}

// awaitTurn notes that w waits for its turn, sending nothing until it
// unparks; p is what it would ask for.
func (g *gates) awaitTurn(w *waiter, p store.AcquireParams) {
	g.mu.Lock()
	w.hand.inTurn, w.hand.params = true, p
	g.mu.Unlock()
}

// parkNext parks w, which has just become the head of its line after the
// head before it took the name, when it waits for its turn: it will not
// ask before a release, and the release that follows may come before it
// runs again. g.mu is held.
func (g *gates) parkNext(w *waiter) {
	if g.hands && w.hand.inTurn && w.hand.State == handoff.Busy {
		w.hand.ParkLocked()
	}
}

// unpark makes w busy as it wakes, first waiting out a claim in progress,
// and returns the result a claim left, if any. It ends w's wait for its
// turn first, so that parkNext cannot park it again once it is busy.
func (g *gates) unpark(w *waiter) *handoff.Result {
	g.mu.Lock()
	w.hand.inTurn = false
	g.mu.Unlock()
	return w.hand.Unpark(&g.mu)
}

// handOver is lineRows.Release with the head w claimed: the hand-off's
// statement, and its outcome for w. A statement whose outcome is unknown
// leaves w to read it back, and the keeper to retry or read back the
// release; one that failed, having done nothing, is followed by the plain
// release.
func (r lineRows) handOver(ctx context.Context, w *waiter, name, owner string, token dblock.Token) (bool, error) {
	g := r.gates
	reqStart := time.Now()
	h, err := r.db.HandLease(ctx, name, owner, token, w.hand.params)
	switch {
	case err != nil && leasekeeper.OutcomeUnknown(err):
		g.finish(w, &handoff.Result{ReqStart: reqStart, Err: err})
		return false, err
	case err != nil:
		g.finish(w, nil)
		return r.release(ctx, name, owner, token)
	case h.Handed:
		// The kick that follows wakes nobody else: the name is w's.
		g.released(name, w.owner)
		g.handed.Add(1)
		g.finish(w, &handoff.Result{ReqStart: reqStart,
			Res: store.AcquireResult{Acquired: true, Token: h.Token, Reentry: h.Reentry}})
	default:
		if h.Released {
			g.released(name, h.Kept)
		}
		g.finish(w, nil)
	}
	return h.Released, nil
}

// takeHanded returns the lease a release handed to this call; a hand-off
// whose outcome is unknown is read back as a lost acquire is (unknown).
func (a *acquisition) takeHanded(r *handoff.Result) (*dblock.Lease, error) {
	if r.Err != nil {
		a.unknown = &pending{name: a.name, owner: a.o.Owner, handles: a.l.handles(a.name, a.o.Owner), reqStart: r.ReqStart, err: r.Err}
		return nil, nil
	}
	a.reserved = false // The take cleared it.
	return a.l.newLease(a.name, a.o, r.Res, r.ReqStart, time.Since(a.start))
}

// park makes the call claimable for its sleep where releases hand over, and
// returns the channel a claim's end is signalled on (nil when not parked).
func (a *acquisition) park() <-chan struct{} {
	if !a.l.gates.hands || a.w == nil {
		return nil
	}
	a.l.gates.park(a.w, a.params)
	return a.w.hand.Wake
}

// unpark ends the call's sleep for its Locker's releases: it waits out a
// claim in progress and returns the claim's result, if any.
func (a *acquisition) unpark() *handoff.Result {
	if !a.l.gates.hands || a.w == nil {
		return nil
	}
	return a.l.gates.unpark(a.w)
}

// awaitTurn marks the call as waiting for its turn, where releases hand
// over (see gates.parkNext).
func (a *acquisition) awaitTurn() {
	if a.l.gates.hands && a.w != nil {
		a.l.gates.awaitTurn(a.w, a.params)
	}
}
