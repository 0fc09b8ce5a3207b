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
// Do, Close, hooks and loss errors. The test drives its time (Clock) and
// its faults (Expire, TakeOver, ForceRelease, DropConnection,
// StopRenewing, FailAcquires) and reads who holds what (Holders).
// It is safe for concurrent use.
type Locker struct {
	clock  *Clock
	events obs.Events

	mu      sync.Mutex
	names   map[string]*record
	tokens  map[string]dblock.Token
	changed map[string]chan struct{} // closed (and replaced) when the name may have freed
	failing []error                  // errors for the next acquires, in order
	closed  bool
	closing chan struct{}
}

var _ dblock.Locker = (*Locker)(nil)

// Config configures a Locker. A nil *Config means defaults.
type Config struct {
	// Clock is the Locker's time. Defaults to a new clock reading
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
	if c.Clock == nil {
		c.Clock = NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	l := &Locker{
		clock: c.Clock, events: obs.NewEvents(c.Hooks, nil), names: map[string]*record{},
		tokens: map[string]dblock.Token{}, changed: map[string]chan struct{}{}, closing: make(chan struct{}),
	}
	c.Clock.attach(l)
	return l
}

// Clock returns the Locker's clock.
func (l *Locker) Clock() *Clock { return l.clock }

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

// Close ends waits in progress and every lease still held (lost, with
// dblock.ErrClosed), and detaches the Locker from its clock. Calling it
// again does nothing.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closing)
	var ended []*record
	for name, r := range l.names {
		ended = append(ended, r)
		delete(l.names, name)
	}
	l.mu.Unlock()
	l.clock.detach(l)
	for _, r := range ended {
		for _, h := range r.handles {
			h.ctl.LoseIfHeld(dblock.ErrClosed)
		}
	}
	return nil
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool, opts []dblock.Option) (*dblock.Lease, error) {
	c, err := mode.BeginOne(ctx, "dblocktest: acquire", name, wait, opts)
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := c.WaitContext(ctx)
	defer cancel()
	start := time.Now()
	for {
		lease, changed, err := l.try(name, c.Opts, start)
		if lease != nil || err != nil {
			return lease, err
		}
		var held *dblock.HeldError
		if h, ok := l.holder(name); ok {
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
