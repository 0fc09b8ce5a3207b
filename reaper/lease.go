package reaper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasekeeper"
)

// passLease is the reaper lease of one pass. A Keeper of the pass's own,
// the one the lock modes use, renews it in the background every third of
// its TTL and declares it lost at its local deadline or when a renewal finds
// it taken; the pass checks it before every batch and cuts every batch at
// its deadline.
type passLease struct {
	k     *leasekeeper.Keeper
	lease *dblock.Lease
	owner string
}

// holdLease hands the reaper lease just acquired (owner, token; asked for
// at start) to a new Keeper.
func (r *Reaper) holdLease(owner string, token dblock.Token, start time.Time) (*passLease, error) {
	k := leasekeeper.New(leasekeeper.Config{
		DB: r.db, Prefix: "reaper", Logger: r.log, ReleaseTimeout: r.cfg.QueryTimeout,
	})
	lease, err := k.Start(leasekeeper.Params{
		Name: LeaseName, Owner: owner, Mode: dblock.ModeOptimistic, Token: token, TTL: r.leaseTTL,
		ReqStart: start, Reentry: 1,
	})
	if err != nil {
		_ = k.Close()
		return nil, fmt.Errorf("reaper: hold lease %q: %w", LeaseName, err)
	}
	return &passLease{k: k, lease: lease, owner: owner}, nil
}

// bounded runs one attempt of a batch on a context that ends at timeout, at
// the lease's local deadline or at its loss, whichever comes first. cut
// reports that the lease (its deadline or its loss) ended a failed attempt.
func bounded[T any](ctx context.Context, l *passLease, timeout time.Duration, run func(context.Context) (T, error)) (res T, cut bool, err error) {
	dl, _ := l.lease.Deadline()
	deadline := earlier(time.Now().Add(timeout), dl)
	lctx, lcancel := l.lease.Context(ctx)
	defer lcancel()
	bctx, cancel := context.WithDeadline(lctx, deadline)
	defer cancel()
	res, err = run(bctx)
	cut = err != nil && (l.lease.Err() != nil || bctx.Err() != nil && !deadline.Before(dl))
	return res, cut, err
}

// lostErr is the loss that cut a batch: the lease's own, or an expiry at
// its local deadline that the Keeper has not reported yet.
func (l *passLease) lostErr() error {
	if err := l.lease.Err(); errors.Is(err, dblock.ErrLost) {
		return err
	}
	return &dblock.LostError{Name: LeaseName, Reason: dblock.ErrExpired}
}

// release gives the reaper lease back, even when ctx is done, and stops
// its Keeper. A lease already lost is gone: nothing to give back.
func (r *Reaper) release(ctx context.Context, l *passLease) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
	defer cancel()
	err := l.lease.Release(rctx)
	cerr := l.k.Close()
	switch {
	case errors.Is(err, dblock.ErrLost):
		r.log.WarnContext(ctx, "reaper: lease was gone at release", "lock_key", LeaseName, "owner", l.owner,
			"token", int64(l.lease.Token()), "error", err)
		return nil
	case err != nil:
		r.orphan(l.owner) // The next pass frees it (see reclaim).
		return fmt.Errorf("reaper: release lease %q: %w", LeaseName, err)
	case cerr != nil:
		return fmt.Errorf("reaper: release lease %q: %w", LeaseName, cerr)
	}
	return nil
}
