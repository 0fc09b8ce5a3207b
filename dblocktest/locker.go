package dblocktest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/obs"
)

// releaseTimeout bounds the release Do runs after fn.
const releaseTimeout = 5 * time.Second

// Locker is an in-memory dblock.Locker with the lease contract of the
// optimistic mode: names, owners, re-entry, tokens that only grow per
// name, leases that run out by the Clock, TryAcquire, Acquire that waits,
// Do, Close, hooks and loss errors. Its Database holds the names, drives
// time (Clock) and faults (Expire, TakeOver, ForceRelease, DropConnection,
// StopRenewing, FailAcquires), and tells who holds what (Holders); several
// Lockers on one Database stand for several processes.
// It is safe for concurrent use.
type Locker struct {
	db     *Database
	events obs.Events

	closeOnce sync.Once
	closing   chan struct{} // closed by Close
}

var _ dblock.Locker = (*Locker)(nil)

// Config configures a Locker. A nil *Config means defaults.
type Config struct {
	// Database is the store the Locker shares with other Lockers, as
	// processes share a database. Defaults to a new one on Clock.
	Database *Database
	// Clock is the time of a new Database. Defaults to a new clock reading
	// 2026-01-01 UTC.
	Clock *Clock
	// Hooks observe acquisitions, releases and losses, as a real Locker's.
	Hooks *dblock.Hooks
}

// New returns an in-memory Locker.
func New(cfg *Config) *Locker {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Database == nil {
		c.Database = NewDatabase(c.Clock)
	}
	return &Locker{db: c.Database, events: obs.NewEvents(c.Hooks, nil), closing: make(chan struct{})}
}

// Database returns the Locker's database: its clock, faults and holders.
func (l *Locker) Database() *Database { return l.db }

// Clock returns the clock of the Locker's database.
func (l *Locker) Clock() *Clock { return l.db.clock }

// Acquire takes name, waiting while another owner holds it until the name
// is released or freed by a fault or by the clock, or ctx (or
// dblock.WithWait, in real time) ends the wait.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return l.acquire(ctx, name, true, opts)
}

// TryAcquire takes name if it is free or already this owner's, and
// otherwise returns an error wrapping dblock.ErrNotAcquired with a
// *dblock.HeldError naming the holder.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return l.acquire(ctx, name, false, opts)
}

// Do acquires name (waiting), runs fn with a context cancelled with the
// loss as cause, and releases.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	return mode.Do(ctx, nil, l.Acquire, name, opts, releaseTimeout, fn)
}

// Close ends waits in progress and every lease still held through l (lost,
// with dblock.ErrClosed), freeing their names. Calling it again does
// nothing.
func (l *Locker) Close() error {
	l.closeOnce.Do(func() {
		close(l.closing)
		l.db.closeLocker(l)
	})
	return nil
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool, opts []dblock.Option) (*dblock.Lease, error) {
	c, err := mode.BeginOne(ctx, "dblocktest: acquire", name, wait, opts)
	if err != nil {
		return nil, err
	}
	if c.Opts.MinHold != 0 {
		return nil, fmt.Errorf("dblocktest: acquire %q: %w: WithMinHold is not modelled (use a real database: dblocktest.SQLite)", name, dblock.ErrInvalidOption)
	}
	waitCtx, cancel := c.WaitContext(ctx)
	defer cancel()
	start := time.Now()
	for {
		lease, changed, err := l.db.try(l, name, c.Opts, start)
		if lease != nil || err != nil {
			return lease, err
		}
		var held *dblock.HeldError
		if h, ok := l.db.Holder(name); ok {
			held = &dblock.HeldError{Name: name, Owner: h.Owner, Mode: h.Mode, ExpiresAt: h.ExpiresAt}
		} else {
			held = &dblock.HeldError{Name: name}
		}
		if !c.Wait {
			return nil, fmt.Errorf("dblocktest: acquire %q: %w", name, held)
		}
		select {
		case <-changed:
		case <-l.closing:
			return nil, fmt.Errorf("dblocktest: acquire %q: %w: %w", name, dblock.ErrNotAcquired, dblock.ErrClosed)
		case <-waitCtx.Done():
			held.Cause = context.Cause(waitCtx)
			return nil, fmt.Errorf("dblocktest: acquire %q: %w", name, held)
		}
	}
}
