package leasekeeper

import (
	"context"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

// Rows are the statements a Keeper runs for one kind of lease: renewing,
// releasing and reading it. A lease names its own (Params.Rows); an
// exclusive lease of dblock_locks is the default.
type Rows interface {
	// Renew extends the unexpired lease (name, owner, token) to ttl from
	// the database clock; false when it is no longer held.
	Renew(ctx context.Context, name, owner string, token dblock.Token, ttl time.Duration) (bool, error)
	// Release ends one entry of the lease; false when it was not held.
	Release(ctx context.Context, name, owner string, token dblock.Token) (bool, error)
	// Holder reads the lease's row: Owner and Version name the holder (the
	// lease itself while it holds, with its Reentry), Exists false when the
	// row is gone. Its errors are classified.
	Holder(ctx context.Context, name, owner string, token dblock.Token) (store.Holder, error)
}

// exclusive is Rows of a lease on the dblock_locks row of its name.
type exclusive struct{ db *store.DB }

// Exclusive returns the Rows of a lease on the dblock_locks row of its
// name, the default, for a mode that replaces some of its statements.
func Exclusive(db *store.DB) Rows { return exclusive{db} }

func (e exclusive) Renew(ctx context.Context, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return e.db.RenewLease(ctx, nil, name, owner, token, ttl)
}

func (e exclusive) Release(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	return e.db.ReleaseLease(ctx, nil, name, owner, token)
}

func (e exclusive) Holder(ctx context.Context, name, _ string, _ dblock.Token) (store.Holder, error) {
	return e.db.LeaseHolder(ctx, nil, name)
}

// rows returns the Rows of p.
func (k *Keeper) rows(p Params) Rows {
	var r Rows = exclusive{k.cfg.DB}
	if p.Rows != nil {
		r = p.Rows
	}
	if p.MinHold > 0 {
		r = keepFirst{Rows: r, db: k.cfg.DB, min: p.MinHold}
	}
	return r
}

// keepFirst is the Rows of a lease with a minimum hold: its release leaves
// the lease held until the minimum after its acquisition, by the database
// clock, when that is still ahead (store.KeepLease), and releases it
// otherwise.
type keepFirst struct {
	Rows
	db  *store.DB
	min time.Duration
}

func (k keepFirst) Release(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	kept, err := k.db.KeepLease(ctx, name, owner, token, k.min)
	if err != nil || kept {
		return kept, err
	}
	return k.Rows.Release(ctx, name, owner, token)
}
