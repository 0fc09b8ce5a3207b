package optimistic

import (
	"context"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/store"
)

// lineRows are the statements the Keeper runs for this Locker's leases:
// those of an exclusive lease of dblock_locks, with a release that tells
// the Locker's line the owner a reservation kept the freed name for (so
// the kick that follows leaves the head asleep when that owner is not in
// line), and that is not announced when the line waits for the name (its
// head is kicked once the release is done, and takes the name): waiters in
// other processes would only wake to be refused. They reserve the name
// when they next look (reserve.go), and the release after that is
// announced to the reservation's owner alone.
//
// Where the gates hand over, a release hands the name to the line's head
// when it sleeps (handoff.go).
type lineRows struct {
	leasekeeper.Rows // leasekeeper.Exclusive: Renew and Holder.
	db               *store.DB
	gates            *gates
}

func (r lineRows) Release(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	if r.gates.hands {
		if w := r.gates.claim(name, owner); w != nil {
			return r.handOver(ctx, w, name, owner, token)
		}
	}
	return r.release(ctx, name, owner, token)
}

// release is Release without a hand-off.
func (r lineRows) release(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	released, kept, err := r.db.ReleaseLeaseKept(ctx, name, owner, token, r.gates.busy(name))
	if released {
		r.gates.released(name, kept)
	}
	return released, err
}
