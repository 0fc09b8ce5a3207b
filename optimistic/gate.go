package optimistic

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dblock-go/dblock/internal/handoff"
	"github.com/dblock-go/dblock/internal/store"
)

// gates line up one Locker's waiters on a name in arrival order. Only the
// first in line (the head) talks to the database; the others wait for their
// turn without sending anything. A release made through this Locker kicks
// the head at once, and an Acquire that finds others of this Locker already
// waiting queues behind them instead of racing them, so a goroutine that
// releases and acquires again in a loop cannot keep the name from the
// goroutines waiting beside it.
//
// The order is local: waiters in other processes (or on other Lockers)
// compete with the head through the database, where reservations (see
// reserve.go) serve about the longest waiting head first. Mutual exclusion
// never depends on the gate; it only decides who asks next.
//
// Reentrancy never waits in line: a caller whose owner is known to hold the
// name (the holder the line last saw, from this process or another) asks at
// once, and a waiter already in line is kicked when the line learns that
// its owner holds the name (the head before it took it, or the head found
// it held by that owner), so that it re-enters instead of waiting for
// itself.
type gates struct {
	mu sync.Mutex
	m  map[string]*line
	// hands: the Locker's releases hand the name to the line's head
	// (handoff.go; set once, by newGates); handed counts the hand-offs
	// done, for tests.
	hands  bool
	handed atomic.Uint64
}

// line is the queue of one name; q[0] is the head.
type line struct {
	q []*waiter
	// holder is the holder the head last saw, for the error of a waiter
	// that gives up before its turn.
	holder store.Holder
	// kept is the owner a reservation kept the name for when this Locker
	// last freed it ("" when none, or unknown), until the kick reads it.
	kept string
}

// waiter is one Acquire call waiting in a line.
type waiter struct {
	owner string
	// turn receives once when the waiter becomes the head; the value says
	// whether the name may be free (false: the previous head took it).
	turn chan bool
	// kick receives when a release through this Locker may have freed the
	// name (sent to the head), or when the name was found held by the
	// waiter's own owner (sent to any waiter). Buffered one deep; sends
	// never block.
	kick chan struct{}
	// hand is where the waiter stands for its Locker's releases (see
	// handoff.go), guarded by gates.mu.
	hand handSlot
}

func newGates(hands bool) *gates { return &gates{m: map[string]*line{}, hands: hands} }

// busy reports whether some waiters of this Locker are in name's line.
func (g *gates) busy(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[name] != nil
}

// heldBy reports whether the holder the head of name's line last saw is owner.
func (g *gates) heldBy(name, owner string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ln := g.m[name]
	return ln != nil && ln.holder.Owner == owner
}

// join puts a new waiter for owner at the end of name's line and reports
// whether it is the head (the line was empty); a head records seen, the
// holder it found. A waiter that joins behind a holder of its own owner is
// kicked at once.
func (g *gates) join(name, owner string, seen store.Holder) (*waiter, bool) {
	w := &waiter{owner: owner, turn: make(chan bool, 1), kick: make(chan struct{}, 1)}
	if g.hands {
		w.hand.Slot = handoff.NewSlot()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ln := g.m[name]
	if ln == nil {
		ln = &line{}
		g.m[name] = ln
	}
	ln.q = append(ln.q, w)
	if len(ln.q) == 1 {
		ln.holder = seen
	} else if owner != "" && ln.holder.Owner == owner {
		w.poke()
	}
	return w, len(ln.q) == 1
}

// isHead reports whether w is the head of name's line.
func (g *gates) isHead(name string, w *waiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ln := g.m[name]
	return ln != nil && len(ln.q) > 0 && ln.q[0] == w
}

// note records the holder a waiter found.
func (g *gates) note(name string, h store.Holder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ln := g.m[name]; ln != nil {
		ln.saw(h)
	}
}

// saw records h as the name's holder and kicks the waiters of its owner:
// they may re-enter. g.mu is held.
func (ln *line) saw(h store.Holder) {
	ln.holder = h
	if h.Owner == "" {
		return
	}
	for _, x := range ln.q {
		if x.owner == h.Owner {
			x.poke()
		}
	}
}

// poke sends w a kick unless one is pending.
func (w *waiter) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// holder returns the holder the head of name's line last found.
func (g *gates) holder(name string) store.Holder {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ln := g.m[name]; ln != nil {
		return ln.holder
	}
	return store.Holder{}
}

// leave takes w out of name's line. When w was the head, the next waiter
// becomes the head; taken, when not nil, is the hold w leaves with (then
// the next head waits for a release before it asks, and the waiters of
// taken's owner are kicked to re-enter).
func (g *gates) leave(name string, w *waiter, taken *store.Holder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ln := g.m[name]
	if ln == nil {
		return
	}
	for i, x := range ln.q {
		if x != w {
			continue
		}
		ln.q = append(ln.q[:i], ln.q[i+1:]...)
		if len(ln.q) == 0 {
			delete(g.m, name)
		} else {
			if i == 0 {
				ln.q[0].turn <- taken == nil
				if taken != nil {
					g.parkNext(ln.q[0])
				}
			}
			if taken != nil {
				ln.saw(*taken)
			}
		}
		return
	}
}

// released records the owner a reservation kept name for when this
// Locker's release freed it (kept, "" when none or unknown), for the kick
// that follows. With no line there is nobody to kick.
func (g *gates) released(name, kept string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ln := g.m[name]; ln != nil {
		ln.kept = kept
	}
}

// kick tells the head of name's line that a release may have freed it,
// unless the release reported that a reservation keeps the name for an
// owner none of the line's waiters has (released): that waiter, in
// another process or Locker, takes it next, and the head would only be
// refused; it looks again on its own schedule.
func (g *gates) kick(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ln := g.m[name]
	if ln == nil {
		return
	}
	kept := ln.kept
	ln.kept = ""
	if kept != "" && !slices.ContainsFunc(ln.q, func(w *waiter) bool { return w.owner == kept }) {
		return
	}
	ln.q[0].poke()
}
