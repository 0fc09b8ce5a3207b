package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
)

// cliLocker is a mode's Locker plus what exec needs while CMD runs.
type cliLocker interface {
	dblock.Locker
	// keepAlive keeps a held lease alive while CMD runs, beyond what the
	// mode does by itself, until the returned stop is called (before
	// Release).
	keepAlive(lease *dblock.Lease, ttl time.Duration) (stop func())
}

// newLocker returns the Locker of a mode: optimistic (lease), pessimistic
// (a transaction held while CMD runs) or fair (optimistic leases taken in
// FIFO order).
func newLocker(db *dialect.DB, spec execSpec, logger *slog.Logger) (cliLocker, error) {
	switch spec.mode {
	case dblock.ModeRead:
		l, err := rwlock.New(db, &rwlock.Config{Logger: logger, Fair: spec.fair})
		if err != nil {
			return nil, err
		}
		return leaseLocker{readLocker{l}}, nil
	case dblock.ModeSemaphore:
		l, err := semaphore.New(db, &semaphore.Config{Logger: logger, Fair: spec.fair})
		if err != nil {
			return nil, err
		}
		return leaseLocker{semLocker{l, spec.limit, spec.permits}}, nil
	case dblock.ModeOptimistic:
		l, err := optimistic.New(db, &optimistic.Config{Logger: logger})
		if err != nil {
			return nil, err
		}
		return leaseLocker{l}, nil
	case dblock.ModePessimistic:
		l, err := pessimistic.New(db, &pessimistic.Config{Logger: logger})
		if err != nil {
			return nil, err
		}
		return &txLocker{Locker: l.AsLocker(), l: l, db: db, shared: spec.read, held: map[*dblock.Lease]*pessimistic.Lease{}}, nil
	case dblock.ModeFair:
		l, err := fairqueue.New(db, &fairqueue.Config{Logger: logger})
		if err != nil {
			return nil, err
		}
		return leaseLocker{l}, nil
	}
	return nil, usageErrorf("exec: unknown mode %q", spec.mode)
}

// leaseLocker is a lease mode: its watchdog renews the lease by itself.
type leaseLocker struct{ dblock.Locker }

func (leaseLocker) keepAlive(*dblock.Lease, time.Duration) func() { return func() {} }

// txLocker is the pessimistic mode. The server ends a holding transaction
// left idle past its bound (the TTL rounded up, see store.HoldBound; so
// that a frozen client cannot keep a name forever), and the transaction is
// idle while CMD runs; keepAlive therefore runs a trivial statement on it
// every quarter of that bound, which stops when dblock stops.
type txLocker struct {
	dblock.Locker
	l      *pessimistic.Locker
	db     *dialect.DB
	shared bool // --read: the shared form (AcquireShared)

	mu   sync.Mutex
	held map[*dblock.Lease]*pessimistic.Lease
}

func (t *txLocker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	acquire := t.l.Acquire
	if t.shared {
		acquire = t.l.AcquireShared
	}
	lease, err := acquire(ctx, name, opts...)
	return t.remember(lease, err)
}

func (t *txLocker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	try := t.l.TryAcquire
	if t.shared {
		try = t.l.TryAcquireShared
	}
	lease, err := try(ctx, name, opts...)
	return t.remember(lease, err)
}

func (t *txLocker) remember(lease *pessimistic.Lease, err error) (*dblock.Lease, error) {
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.held[lease.Lease] = lease
	t.mu.Unlock()
	return lease.Lease, nil
}

func (t *txLocker) keepAlive(lease *dblock.Lease, ttl time.Duration) func() {
	t.mu.Lock()
	pl := t.held[lease]
	t.mu.Unlock()
	if ttl <= 0 {
		ttl = dblock.TTLDefault
	}
	bound := store.Of(t.db).HoldBound(ttl)
	if pl == nil || bound == 0 { // SQLite has no idle bound.
		return func() {}
	}
	return keepAlive{tx: pl.Tx(), stmt: "SELECT 1", every: keepAliveEvery(bound), lost: lease.Done()}.start()
}

// modeOf returns the mode named by the exec flags.
func modeOf(mode string, fair bool) (string, error) {
	switch mode {
	case dblock.ModeOptimistic:
		if fair {
			return dblock.ModeFair, nil
		}
		return dblock.ModeOptimistic, nil
	case dblock.ModePessimistic:
		if fair {
			return "", usageErrorf("exec: --fair works with --mode optimistic only (fair locks are leases taken in queue order)")
		}
		return dblock.ModePessimistic, nil
	}
	return "", usageErrorf("exec: unknown --mode %q: want optimistic or pessimistic (see dblock exec --help)", mode)
}

// lockOptions are the acquisition options of exec: the lease is always
// renewed while CMD runs; with --ttl it is that long (and renewed every
// third of it), else dblock.TTLDefault. A pessimistic hold asks for a fencing
// token, so DBLOCK_TOKEN means the same in every mode.
func lockOptions(spec execSpec, owner string, ttl time.Duration, hasTTL bool, wait time.Duration, hasWait bool, metadata string) []dblock.Option {
	var opts []dblock.Option
	mode := spec.mode
	if mode != dblock.ModePessimistic {
		opts = append(opts, dblock.WithMetadata(metadata)) // a pessimistic hold stores none
	}
	if owner != "" {
		opts = append(opts, dblock.WithOwner(owner))
	}
	if hasTTL {
		opts = append(opts, dblock.WithTTL(ttl))
	}
	if hasWait && wait > 0 {
		opts = append(opts, dblock.WithWait(wait))
	}
	if mode == dblock.ModePessimistic && !spec.read {
		opts = append(opts, dblock.WithToken()) // A shared hold has none of its own.
	}
	return opts
}
