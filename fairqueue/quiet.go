package fairqueue

import "time"

// quietAfter is how long after meeting a holder or a queue on a name a
// Locker keeps looking at the queue before its direct acquisitions of that
// name (see store.AcquireParams.QueueQuiet). A name it has not met one on
// lately is quiet: on MySQL its direct acquisition skips the look at the
// queue (one statement less), and the check after the acquisition keeps the
// queue's order. Locker.contended remembers the meetings.
const quietAfter = time.Second

// quiet reports whether name met no holder or queue in the last quietAfter.
func (l *Locker) quiet(name string) bool { return !l.contended.Within(name, quietAfter) }

// queuesFirst reports whether a waiting acquisition of name joins the queue
// without a direct attempt first: where the enqueue answers the waiter's
// first check (store.EnqueueChecked), while another waiter of this Locker
// waits for name, so that the attempt would be refused. The answer tells
// all the attempt would have: a waiter with nobody ahead of it on a free
// name takes at once, and one whose owner holds the name re-enters without
// waiting (queueWait.ownerHolds).
func (l *Locker) queuesFirst(name string) bool {
	return l.db.EnqueuesChecked() && l.local.waiting(name)
}
