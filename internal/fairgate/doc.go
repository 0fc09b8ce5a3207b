// Package fairgate is the fair option of the shared locks (rwlock's
// readers and writers, semaphore's grants): arrival order among fair
// callers, kept in the queue table the fair mode uses (dblock_waiters),
// in front of the mode's own acquisition.
//
// A fair call first looks at the queue (one statement, Gate.Acquire's
// peek). When the owner holds the name already it goes straight to the
// mode (a re-entry, a downgrade, or the refusal of an upgrade never waits
// in a queue, where it could wait for itself). When nobody is in its way
// it tries once, and joins the queue only when refused. In the queue it
// waits until no live waiter ahead of it is in its way (store.WaitKind:
// a reader lets readers ahead of it be, a writer or an exclusive fairqueue
// waiter waits for everyone ahead, a semaphore grant for the earlier
// grants of its semaphore), then runs the mode's waiting acquisition and
// leaves the queue once that ends. Its row is kept alive by a heartbeat
// meanwhile; a waiter that dies stops holding up the others within
// HeartbeatTimeout, and a waiter that finds its row lapsed joins again at
// the back.
//
// The order binds fair callers: a non-fair caller of the same name (an
// optimistic lock, a reader of a Locker without the option) is not held
// back by the queue, as with fairqueue.
package fairgate
