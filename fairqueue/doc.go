// Package fairqueue provides fair (FIFO) lease locks: waiters take a name in
// the order they arrived, on PostgreSQL, MySQL/MariaDB and SQLite.
//
// A held fair lock is the same dblock_locks lease row the optimistic mode
// uses (mode "fair"), so the modes share one namespace and one *dblock.Lease
// contract: a fencing token strictly increasing per name, Done and Err when
// the lock is lost, owner-only Release, reentrancy for the owner that holds
// it, and a watchdog that renews a lease given no TTL every TTL/3.
//
// # The queue
//
// An Acquire that finds the name free and nobody queueing takes it at once:
// on PostgreSQL and SQLite one statement checks the queue and takes the
// lock, and on MariaDB one call (a procedure that reads the queue before it
// locks the lock row), so a waiter whose row committed before it began is
// never jumped; on MySQL 8 a lockless read of the queue comes first and,
// after taking the lock, a second read of the waiters created before the
// lease hands it back at once if one was (InnoDB would read the queue
// inside the acquiring statement only with next-key locks, which a no-wait
// acquisition cannot take while a neighbouring waiter row is written). Otherwise it inserts a
// waiter row into dblock_waiters, stamped by the database clock (created_at,
// with the auto-increment id as tie-break), and waits. Where the insert
// answers the waiter's first check (PostgreSQL, MariaDB), an Acquire of a
// name that another waiter of the same Locker waits for inserts its row
// without trying at once: the answer tells the same, and a waiter first in
// line on a free name takes it straight away. A waiter may take the lock
// only when it is the oldest live waiter of the name and the lock row is
// free or expired; taking the lock (the lease statement) and deleting the
// waiter row commit in one transaction (on PostgreSQL one statement, on
// MariaDB one procedure call), so nobody ever sees the row gone while the
// lock is free, or the lock taken while the row is still first.
//
// Waiters are live while their heartbeat deadline (expires_at) is in the
// future by the database clock. Each Locker refreshes all of its waiters in
// one statement every Config.HeartbeatInterval. A waiter whose process
// crashed stops being refreshed; once its deadline passes (at most
// Config.HeartbeatTimeout after the crash) every other waiter skips it, and
// the reaper deletes its row. A waiter that finds its own row dead (its
// process was frozen past the timeout) has lost its place: it queues again
// at the back and says so at Warn. A waiter that gives up (ctx, WithWait,
// Close) deletes its own row on a context that outlives the caller's.
//
// TryAcquire never queues: it succeeds only when no live waiter exists and
// the lock is free (or already the caller's own, for reentry).
//
// # Wake-ups
//
// Only the waiter that may be next re-checks at once. A check reports how
// many live waiters are ahead and whether the lock is held. Between checks a
// waiter counts the queue's events: releases and waiters leaving (a
// PostgreSQL notification of the name, sent by every release, leave and
// reaper deletion, or the Locker's own release or leave; takes are not
// events). A waiter k places from the head may be next only after k events,
// k+1 if the lock was held, and re-checks early only then: one check per
// hand-off for the next waiter, none for the others. The head re-checks on a
// release, on a short capped, jittered backoff (Config.HeadPollMax) and at
// the holder's expiry; waiters behind it poll at a cadence that grows with
// their distance from the head and doubles while the queue stands still,
// capped by Config.PollMax, and wake at the heartbeat deadline of the waiter
// directly ahead, so a waiter whose process died delays the queue by its
// heartbeat timeout, no more. On MySQL and SQLite (and PostgreSQL with
// Config.DisableNotify), across processes, the timers are the only
// mechanism: there a waiter k places behind the head first sleeps k times
// Config.PollMin (the head's first step), so the next head looks about one
// step after a move (where notifications are on and the timers only back
// them up, it is Config.HeadPollMax per place and one more).
//
// # Hand-offs
//
// On PostgreSQL and MariaDB a release hands the name to the releasing
// Locker's next waiter of it in the release's own statement (a procedure's
// CALL on MariaDB, MySQL migration 00028): the Locker's oldest waiter of the
// name, while it sleeps, is claimed, and the statement makes the name its
// lease when it is live and first in the queue and the release frees the
// name, and otherwise releases; while another transaction holds the row (a
// pessimistic hold, shared or not, taken once the lease ran out) it hands
// nothing, and the waiter takes the name after that hold. The waiter wakes
// with its lease having sent nothing, so a name contended within one
// process changes hands in one statement. A waiter whose sleep ends while
// it is claimed (its timer, its context) waits for the claim's outcome, and
// a lease handed to it is returned even if its wait ended meanwhile, as a
// take in flight is. A statement whose outcome is unknown (its connection
// broke) is read back by the waiter, tried again until it reads an answer
// (for Config.ReleaseTimeout at least, then while its wait lasts), as a
// take of its own whose outcome is unknown is: handed, it returns the
// lease; otherwise it looks again.
// While a lease of this Locker holds the name, the events a waiter counts
// do not end its sleep (notifications may echo its own Locker's hand-offs,
// and are counted without waking it; a count may run ahead of its turn):
// the lease's release wakes it, or hands it the name. The releases of
// other modes and of earlier versions hand nothing over; their waiters
// take the name after the release, as before.
//
// # Order and its limits
//
// Order is by created_at, then id, as the database assigned them. A waiter
// whose insert committed before another's began is always ahead of it. Two
// inserts in flight at the same time are ordered by the database, not by the
// callers. Fairness holds among fair acquirers only: an optimistic or
// pessimistic acquirer of the same name does not queue and may take the name
// between two fair holders.
//
// # Observability
//
// Queue lists a name's live waiters with their position and wait age (what
// `dblock status` shows), Locker.Position finds one owner's place,
// WithPositionFunc lets a waiter observe its own place while it waits
// (whatever its owner), and Locker.Stats counts statements, checks and
// heartbeats.
package fairqueue
