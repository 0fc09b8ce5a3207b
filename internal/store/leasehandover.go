package store

import (
	"context"

	"github.com/dblock-go/dblock"
)

// An exclusive lease's release can hand its name to the releasing Locker's
// next waiter in the same statement (LeaseSQL.HandOver, PostgreSQL): the
// waiter wakes with its lease instead of a release for it to take after,
// one statement on a contended name's path instead of the release's and
// the take's. The fair queue's hand-off (HandOver) is the same with the
// queue's row checked and deleted.

// HandsOverLeases reports whether a lease's release can hand the name to
// a waiter here.
func (db *DB) HandsOverLeases() bool { return db.Dialect.Lease().HandOver != "" }

// HandLease releases the lease (name, owner, token) and hands the name to
// the acquisition p (of another owner) when the release frees it and no
// other owner's reservation keeps it (see LeaseSQL.HandOver); otherwise it
// only releases, as ReleaseLeaseKept with quiet set. HandOff.Kept is then
// the owner a reservation keeps the freed name for ("" when none). Where
// the database cannot hand over it only releases.
func (db *DB) HandLease(ctx context.Context, name, owner string, token dblock.Token, p AcquireParams) (HandOff, error) {
	query := db.Dialect.Lease().HandOver
	if query == "" {
		released, kept, err := db.ReleaseLeaseKept(ctx, name, owner, token, true)
		return HandOff{Released: released, Kept: kept}, err
	}
	h, kept, err := db.handOff(ctx, name, query,
		[]any{name, owner, int64(token), p.Owner, ttlArg(p.TTL), modeArg(p.Mode), nullString(p.Metadata)})
	h.Kept = kept // '' when handed.
	return h, db.Classify(err)
}
