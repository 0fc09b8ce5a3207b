package fairqueue

import (
	"context"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/handoff"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/store"
)

// A release hands the name to this Locker's next waiter of it, where the
// database can do so in the release's statement (store.HandOver:
// PostgreSQL's statement, MariaDB's procedure call): the releasing call
// claims the waiter, the statement makes the name that waiter's lease when
// it is live and first in the queue (and releases it otherwise), and the
// waiter wakes with its lease, having sent nothing. A contended name's
// hand-off is then one statement, not the release's and the take's.
//
// A waiter can be claimed only while it sleeps (parked); awake, it is
// busy and the release leaves it be (its own take follows the release, as
// without hand-offs). A waiter whose sleep ends while it is claimed waits
// for the claim's outcome before it does anything else, so it never takes,
// checks or leaves while a release may be handing it the name.

// slot is a queued waiter as its Locker's releases see it. Its fields after
// params, handoff.Slot's, are guarded by line.mu.
type slot struct {
	id      int64
	created time.Time // The row's created_at: the queue's order, with id.
	params  store.AcquireParams
	handoff.Slot
}

// line holds the Locker's queued waiters per name, and per name the
// hand-offs under way: claimed, or handed and not yet collected, that is,
// not yet a lease of the Locker's keeper (see queueWait.echo).
type line struct {
	mu      sync.Mutex
	names   map[string][]*slot
	handing map[string]int
}

// join adds a waiter that just joined name's queue.
func (ln *line) join(name string, s *slot) {
	ln.mu.Lock()
	ln.names[name] = append(ln.names[name], s)
	ln.mu.Unlock()
}

// drop removes a waiter that left name's queue (took, left, or requeued).
func (ln *line) drop(name string, s *slot) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	slots := ln.names[name]
	for i, x := range slots {
		if x == s {
			slots = append(slots[:i], slots[i+1:]...)
			break
		}
	}
	if len(slots) == 0 {
		delete(ln.names, name)
		return
	}
	ln.names[name] = slots
}

// claim returns name's oldest waiter, claimed, when it sleeps and is not
// owner's; nil otherwise.
func (ln *line) claim(name, owner string) *slot {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	var first *slot
	for _, s := range ln.names[name] {
		if first == nil || s.created.Before(first.created) || s.created.Equal(first.created) && s.id < first.id {
			first = s
		}
	}
	if first == nil || first.params.Owner == owner || !first.Claim() {
		return nil
	}
	ln.handing[name]++
	return first
}

// finish ends name's claim of s (handoff.Slot.Finish). A claim that handed
// nothing is over; one that left a result lasts until its waiter collects
// it (settle).
func (ln *line) finish(name string, s *slot, r *handoff.Result) {
	if r == nil {
		ln.settle(name)
	}
	s.Finish(&ln.mu, r)
}

// settle ends a hand-off of name.
func (ln *line) settle(name string) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.handing[name]--; ln.handing[name] <= 0 {
		delete(ln.handing, name)
	}
}

// handingOver reports whether a hand-off of name is under way.
func (ln *line) handingOver(name string) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.handing[name] > 0
}

// park makes s claimable while its waiter sleeps.
func (ln *line) park(s *slot) { s.Park(&ln.mu) }

// woken reports whether a claim left s a result (the sleep's wake-up).
func (ln *line) woken(s *slot) bool { return s.Woken(&ln.mu) }

// unpark makes s busy as its waiter wakes, first waiting out a claim in
// progress, and returns the result a claim left, if any.
func (ln *line) unpark(s *slot) *handoff.Result { return s.Unpark(&ln.mu) }

// handRows are the Rows of this Locker's leases where releases hand over:
// the exclusive lease's, but for Release.
type handRows struct {
	leasekeeper.Rows
	l *Locker
}

// Release releases the lease, handing the name to the Locker's oldest
// waiter of it when that one sleeps (see line.claim). A statement whose
// outcome is unknown leaves that waiter to read it back, and the keeper to
// retry or read back the release; one that failed, having done nothing,
// is followed by the plain release.
func (r handRows) Release(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	s := r.l.line.claim(name, owner)
	if s == nil {
		return r.Rows.Release(ctx, name, owner, token)
	}
	reqStart := time.Now()
	h, err := r.l.db.HandOver(ctx, name, owner, token, s.params, s.id)
	switch {
	case err != nil && leasekeeper.OutcomeUnknown(err):
		r.l.line.finish(name, s, &handoff.Result{ReqStart: reqStart, Err: err})
	case err == nil && h.Handed:
		r.l.line.finish(name, s, &handoff.Result{ReqStart: reqStart,
			Res: store.AcquireResult{Acquired: true, Token: h.Token, Reentry: h.Reentry}})
	default:
		r.l.line.finish(name, s, nil)
		if err != nil {
			// The statement failed and did nothing: release as without
			// hand-offs, so that no failure of its own fails a release.
			return r.Rows.Release(ctx, name, owner, token)
		}
	}
	return h.Released, err
}

// joinLine puts the waiter that just joined the queue into its Locker's
// line, where releases hand over and the enqueue told its place
// (created_at).
func (q *queueWait) joinLine() {
	a := q.a
	if a.l.rows == nil || q.joined == nil {
		return
	}
	q.slot = &slot{id: q.w.id, created: q.joined.CreatedAt, params: a.params, Slot: handoff.NewSlot()}
	a.l.line.join(a.name, q.slot)
}

// drop forgets the waiter's row (gone with a take, a leave or a requeue)
// and takes it out of the line.
func (q *queueWait) drop() {
	if q.slot != nil {
		q.a.l.line.drop(q.a.name, q.slot)
		q.slot = nil
	}
	q.w = nil
}

// park makes the waiter claimable for its sleep and returns the channel
// that wakes it when a claim ends (nil where nothing hands over).
func (q *queueWait) park() <-chan struct{} {
	if q.slot == nil {
		return nil
	}
	q.a.l.line.park(q.slot)
	return q.slot.Wake
}

// collect ends the waiter's sleep for releases: it waits out a claim in
// progress and, when a release handed the waiter the name, returns its
// lease (done). A hand-off whose outcome is unknown is read back: taken,
// the lease; otherwise the loop goes on and its next look decides.
func (q *queueWait) collect() (lease *dblock.Lease, done bool, err error) {
	if q.slot == nil {
		return nil, false, nil
	}
	r := q.a.l.line.unpark(q.slot)
	if r == nil {
		return nil, false, nil
	}
	a := q.a
	defer a.l.line.settle(a.name) // The lease, if any, is the keeper's by then.
	if r.Err == nil {
		a.l.beats.remove(q.w.id)
		q.drop()
		lease, err = a.started(r.Res, r.ReqStart)
		return lease, true, err
	}
	if lease, _ = a.takenAnyway(q.w, r.ReqStart, r.Err); lease != nil {
		q.drop()
		return lease, true, nil
	}
	q.released = false
	return nil, false, nil
}

// echo reports whether the events a sleep counted may have run ahead of
// the waiter's turn, so that waking for them would only cost a look: where
// releases hand over, while a lease of this Locker holds the name, or a
// hand-off of it to one of the Locker's waiters is under way (between the
// release's claim and the lease the waiter collects: line.handing). Two
// ways they run ahead: a notification arrives after the statement that
// sent it has returned, and a hand-off's may reach a waiter that joined
// after it; and the count starts before the enqueue whose answer the
// waiter read, so a release while the enqueue ran (a durable commit on
// MariaDB) is counted and is also one fewer waiter ahead. Counted, the
// waiter would wake an event early, and not be asleep when its turn is
// handed over: the release then releases plainly and the waiter takes by
// itself, two statements more (about a quarter of MariaDB's contended
// acquisitions). While the Locker holds the name its release wakes the
// waiter anyway, handing it the name or counted as its own event, and
// the notifications of a release elsewhere come after that; a lease the
// Locker loses instead wakes nobody, and the sleep's timer ends the wait.
func (q *queueWait) echo() bool {
	return q.slot != nil && q.a.l.held(q.a.name)
}

// held reports whether a lease of this Locker holds name, or a hand-off
// of it to one of the Locker's waiters is under way.
func (l *Locker) held(name string) bool {
	return l.keeper.HoldsName(name) || l.line.handingOver(name)
}

// echoing is the hub's test of a notice of name for a waiter of this
// Locker (wake.Hub.SubscribeCounted's quiet): where releases hand over,
// one that arrives while the Locker holds name (held) wakes nobody, since
// the waiter would go back to sleep on it (echo) and the Locker's release
// wakes it by itself (a local event, or the hand-off); the notice is still
// counted, and the waiter reads the count when it wakes. Nil where
// nothing hands over.
func (l *Locker) echoing(name string) func() bool {
	if l.rows == nil {
		return nil
	}
	return func() bool { return l.held(name) }
}
