package store

import (
	"context"
	"time"
)

// Marks of listening (PostgreSQL). A release announces its name only while
// the name's row says that a waiter listens for it (listened_until after the
// database clock), besides a name handed to readers or kept by a
// reservation (see LeaseSQL.Release). A Locker's wake-up hub marks the row
// when one of its calls starts to wait for the name, before that call asks
// again: a release that commits before the mark leaves the name free for
// that ask; one that commits after it sees the mark (the release's
// update reads the row's latest version) and is announced. The hub renews
// the mark while any of its calls waits, and lets it lapse after.

// MarkListened records on name's row that a waiter listens for its release
// for d from the database clock, unless the row has a mark with more than
// half of d left. It reports whether the row exists and is marked now:
// false for a name without a row (nothing to announce) and where releases
// are not announced. The write is not waited for durably (a mark lost in a
// crash costs the waiters their wake-up: they find the name by polling), and it gives up after 100 ms on a row another
// transaction has locked (a pessimistic holder), with the server's error.
func (db *DB) MarkListened(ctx context.Context, name string, d time.Duration) (bool, error) {
	q := db.Dialect.Lease().MarkListened
	if q == "" {
		return false, nil
	}
	var exists bool
	if err := db.QueryRowxContext(ctx, q, name, d.Microseconds()).Scan(&exists); err != nil {
		return false, db.Classify(err)
	}
	return exists, nil
}
