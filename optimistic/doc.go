// Package optimistic provides lease locks on the dblock_locks table: a lock is
// a row naming its owner, a fencing token (the row's version) and an expiry
// by the database clock, taken and released by compare-and-swap statements.
// No transaction or connection is held between calls, so a lock can be held
// for hours and works through poolers in transaction mode.
//
// # State model
//
// A name's row is free (no owner), held (an owner and an unexpired
// expires_at), or expired (an owner whose expires_at has passed, which anyone
// may take over). Acquire is one statement: it inserts the row, or takes it
// when free, expired or already held by the same owner (reentry: the count
// goes up and the token stays); a free or expired row that another owner's
// waiter reserved is taken by that owner only (see Waiting). Every new hold
// gets a token strictly greater than any earlier token for the name. Release
// is one CAS on (name, owner, token): it decrements the reentry count and
// frees the row at zero.
//
// A lease lasts its TTL (dblock.WithTTL, default dblock.TTLDefault) and a
// watchdog renews it every TTL/3 until Release (a CAS on the same triple). A
// renewal that fails for a transient reason is retried; the lease is declared
// lost only when a renewal finds the row no longer ours or when the local
// deadline passes without a successful renewal. dblock.WithMaxHold caps the
// renewals: the lease ends at its local deadline once the cap is reached.
// Either way Lease.Done closes and Lease.Err says why: ErrExpired,
// ErrTakenOver or ErrForceReleased, each wrapped in a *dblock.LostError.
// Release after a loss returns that error.
//
// The local deadline is the local monotonic time at which the acquiring (or
// renewing) statement was sent, plus the TTL. The database measures from a
// later instant, so the holder always stops trusting its lease no later than
// the database ends it.
//
// # Waiting
//
// Acquire waits while another owner holds the name. On PostgreSQL one
// connection per Locker LISTENs for releases (pg_notify on the dblock channel)
// and wakes the waiters of that name at once. Every waiter also wakes at the
// holder's expiry by the database clock and on a capped, jittered backoff
// (Config.PollMin to Config.PollMax), the only mechanisms on MySQL and
// SQLite and the fallback where LISTEN cannot work. Timer wake-ups read the
// row before trying to write it. A wait ends with ctx or dblock.WithWait;
// the error wraps dblock.ErrNotAcquired, the *dblock.HeldError naming the
// holder, and context.Cause(ctx).
//
// A Locker lines its own waiters on a name up in arrival order: only the
// first asks the database, and a release through the Locker wakes it at
// once. Across Lockers (and processes), the first waiter of a line that
// finds the name held by another Locker reserves it: the row names the
// waiting owner and when it began to wait by the database clock, and while
// the reservation lasts (at least a second, renewed as the waiter looks
// again) the name, once free, goes to that owner only, whichever Locker
// released it; a waiter that began waiting earlier takes the reservation
// over. So a process that releases and acquires again in a loop cannot keep
// the name from waiters in other processes, which hear of the release only
// by a notification or their next look. A try is refused while another
// owner's reservation lasts (the *dblock.HeldError's cause says so). A wait
// that ends without the name gives its reservation up; a waiter that crashes
// leaves the name free but unclaimed until its reservation lapses. Where
// nothing announces releases (MySQL, MariaDB, SQLite), the reserver first
// looks a tenth of PollMin after it reserved (at least 500 µs), doubling
// up to four PollMin (at most PollMax), so a name freed in another process changes hands
// within a look or two; the waiters it keeps out look at most every two
// PollMin, so that one of them reserves the name soon after the reserver
// took it.
//
// On PostgreSQL a release that frees a name kept for another owner's waiter
// is announced to that owner alone, and a release that the Locker's own
// waiters wait for, with no reservation, is not announced: its next waiter
// takes the name, and waiters elsewhere reserve it at their next look. So a
// process serves its own waiters a few times in a row, and a hand-off to
// another process wakes only the waiter that takes. Nor is a release
// announced that nobody listens for: a Locker whose call starts to wait for
// a name marks the name's row as listened for (column listened_until, migration
// 00019, by the database clock, for 10 s, renewed while any of its calls
// waits), and a release announces the name only while a mark is live.
// Every announcement costs the releasing commit PostgreSQL's notification
// lock, which serialises the commits of every client that announces.
//
// On PostgreSQL a release through the Locker hands the name to its next
// waiter in the release's own statement when that waiter sleeps and the
// release frees the name for it (no other owner's reservation keeps it):
// the waiter wakes holding its lease, having sent nothing, so a contended
// name changes hands in one statement instead of two. Such a release
// commits durably (it is an acquisition), where a plain release does not
// wait for the flush. A wait that ends while a release hands it the name
// returns that lease. An rwlock's write side does not hand over.
//
// # Several names at once
//
// AcquireMany and TryAcquireMany take a set of names in one transaction, in
// name order, all or none: a caller never holds part of a set while waiting
// for the rest, so callers asking for overlapping sets cannot deadlock. Each
// name gets its own lease (token, renewal, Release).
//
// # Unknown outcomes
//
// A statement whose connection breaks (a reset, a killed session, a
// failover) may have committed before its answer was lost; such errors
// wrap dblock.ErrUnavailable. An acquire in that state reads the row on a
// fresh connection before doing anything else: if the lost statement took
// the lock, Acquire returns that lease (it never re-enters its own hold by
// trying again); if not, it goes on as if the attempt had found the name
// held. The read is tried again after a failure, each try bounded by a
// fifth of Config.StatementTimeout (a new connection into a network that
// drops it would otherwise use the whole bound). When the row cannot be
// read within Config.StatementTimeout, the error says the outcome is
// unknown and the name may stay held by the caller's owner until the TTL
// ends. A release whose connection broke reads the row before trying
// again, so a nested handle is never released twice. These checks count
// the handles of one Locker: an owner shared by several processes is
// outside them.
//
// # What a lease does not guarantee
//
// A lease is exclusive only while it is held: a process that stalls (a long
// GC pause, a frozen VM, a partition) past its deadline may still be running
// its critical section when another owner takes the name over. Done and
// Lease.Context tell the holder as soon as its own clock can, but nothing can
// stop a write that is already in flight. Protect the resource itself with
// the fencing token, or write through Guard in the same transaction.
//
// # How to use the token
//
// Store the highest token seen with the protected resource and reject writes
// that carry an older one, in the same statement:
//
//	UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// A write that matches no row came from a holder that was superseded.
// userrows.FencedUpdate builds that statement for a table of the caller's (validated
// identifiers, bind parameters) and says which fence refused the write. When
// the protected data lives in the same database, Guard checks inside the
// caller's transaction that the lease still holds and keeps it so until
// commit.
package optimistic
