package dblockgocron

import (
	"context"
	"errors"

	"github.com/go-co-op/gocron/v2"

	"github.com/dblock-go/dblock"
)

// Locker returns a gocron.Locker that takes each run's lock with
// l.TryAcquire(ctx, job name, opts...): a run whose job is held elsewhere
// is not started (gocron skips it), and the lock is released when the run
// ends. Pass dblock.WithMinHold to keep it for a while after each start.
func Locker(l dblock.Locker, opts ...dblock.Option) gocron.Locker {
	return locker{l: l, opts: opts}
}

type locker struct {
	l    dblock.Locker
	opts []dblock.Option
}

func (k locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lease, err := k.l.TryAcquire(ctx, key, k.opts...)
	if err != nil {
		return nil, err
	}
	return lock{lease}, nil
}

// lock is a run's lease.
type lock struct{ lease *dblock.Lease }

// Unlock releases the lease; a lease lost meanwhile is no error of the
// run's (gocron ignores it anyway).
func (k lock) Unlock(ctx context.Context) error {
	if err := k.lease.Release(ctx); err != nil && !errors.Is(err, dblock.ErrLost) {
		return err
	}
	return nil
}
