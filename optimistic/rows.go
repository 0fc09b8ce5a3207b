package optimistic

import (
	"context"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/store"
)

// lineRows are the statements the Keeper runs for this Locker's leases:
// those of an exclusive lease of dblock_locks, with a release that is not
// announced when the Locker's own line waits for the name (its head is
// kicked once the release is done, and takes the name): waiters in other
// processes would only wake to be refused. They reserve the name when they
// next look (reserve.go), and the release after that is announced to the
// reservation's owner alone.
type lineRows struct {
	leasekeeper.Rows // leasekeeper.Exclusive: Renew and Holder.
	db               *store.DB
	gates            *gates
}

func (r lineRows) Release(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	if r.gates.busy(name) {
		return r.db.ReleaseLeaseQuiet(ctx, name, owner, token)
	}
	return r.db.ReleaseLease(ctx, nil, name, owner, token)
}
