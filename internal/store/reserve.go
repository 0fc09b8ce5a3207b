package store

import (
	"context"
	"time"
)

// Reservations: a waiting acquirer of an exclusive lease (optimistic mode,
// rwlock's writers) keeps the name for itself once it is freed, so that
// waiters in other processes are served about in the order they began to
// wait. Without it, the process that releases a name wakes its own next
// waiter at once (its Locker's line) while the others sleep on their
// backoff, and wins the name nearly every time on a database that cannot
// announce releases.
//
// The row's next_owner, next_since and next_until hold one reservation.
// While it is live (next_until after the database clock), the acquire
// statements take a free or expired row for next_owner only; a holder's
// re-entry is not affected. A take by next_owner, or any take once the
// reservation lapsed, clears it. An owner that began waiting earlier than
// next_since takes the reservation over (ReserveLease), so the longest
// waiter among those that ask holds it.

// ReserveLease keeps name for owner once it is freed, for d from the
// database clock: it sets the reservation when there is none live, when it
// is owner's (renewed), or when owner began to wait (since, by the
// database clock) before the owner holding it. It reports whether owner
// holds the reservation now. The write is not waited for durably where the
// database allows (a lost reservation only costs fairness).
func (db *DB) ReserveLease(ctx context.Context, name, owner string, since time.Time, d time.Duration) (bool, error) {
	return db.execOne(ctx, db, db.Dialect.Lease().Reserve, db.reserveArgs(name, owner, since.UnixMicro(), d.Microseconds())...)
}

// UnreserveLease gives up owner's reservation of name, if it holds one: a
// waiter that stops waiting.
func (db *DB) UnreserveLease(ctx context.Context, name, owner string) (bool, error) {
	return db.execOne(ctx, db, db.Dialect.Lease().Unreserve, name, owner)
}

// Reservation is a name's reservation as read: the waiting owner (empty
// when there is none), when it began to wait and when the reservation
// lapses, by the database clock.
type Reservation struct {
	Owner        string
	Since, Until time.Time
}

// LiveAt reports whether the reservation keeps the name at now (the
// database clock).
func (r Reservation) LiveAt(now time.Time) bool { return r.Owner != "" && r.Until.After(now) }

// reservationOf is the reservation read as (owner, since µs, until µs).
func reservationOf(owner string, sinceUs, untilUs int64) Reservation {
	if owner == "" {
		return Reservation{}
	}
	return Reservation{Owner: owner, Since: Micros(sinceUs), Until: Micros(untilUs)}
}

// reserveArgs binds LeaseSQL.Reserve: (name, owner, since µs, d µs), or on
// MySQL, whose placeholders go by position, in the statement's order.
func (db *DB) reserveArgs(name, owner string, sinceUs, forUs int64) []any {
	if db.Dialect.Kind() == MySQL {
		return []any{owner, sinceUs, forUs, name, owner, sinceUs}
	}
	return []any{name, owner, sinceUs, forUs}
}
