package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/telemetry"
)

// Defaults of Config.
const (
	// ObserveIntervalDefault is how often Observe reads the leader.
	ObserveIntervalDefault = 500 * time.Millisecond
	// ResignTimeoutDefault bounds the resignation Run and Close make.
	ResignTimeoutDefault = 5 * time.Second
)

// ErrNoLeader is returned (wrapped) by Leader when no candidate holds the
// office. It wraps dblock.ErrNotHeld.
var ErrNoLeader = fmt.Errorf("election: no leader: %w", dblock.ErrNotHeld)

// ErrNotLeader is returned (wrapped) by Proclaim when this Election does not
// hold the office (it never won, resigned, or lost its term). It wraps
// dblock.ErrNotHeld.
var ErrNotLeader = fmt.Errorf("election: not the leader: %w", dblock.ErrNotHeld)

// Config configures an Election. The zero value (or a nil *Config) means
// defaults.
type Config struct {
	// TTL is the leader's lease: how long the office stays with a leader
	// that went silent (crashed, frozen, cut off), and so how long a
	// failover takes at most. The leader renews it every TTL/3 and stops
	// trusting itself at its local deadline, before the database would let
	// another candidate in. Defaults to dblock.TTLDefault.
	TTL time.Duration
	// ObserveInterval is how often Observe reads the leader. Defaults to
	// ObserveIntervalDefault.
	ObserveInterval time.Duration
	// ResignTimeout bounds the resignation that Run makes when fn returns
	// and that Close makes. Defaults to ResignTimeoutDefault.
	ResignTimeout time.Duration
	// Logger receives terms won and lost at Debug and campaign retries at
	// Warn. Defaults to none: the library logs nothing unless given a
	// logger.
	Logger *slog.Logger
	// Hooks observe terms as leases: OnAcquired when a term begins,
	// OnReleased when it is resigned, OnLost when it is lost.
	Hooks *dblock.Hooks
	// Telemetry chooses where the candidate's metrics and spans go (its
	// terms are optimistic leases). Defaults to the global OpenTelemetry
	// providers.
	Telemetry *telemetry.Config
	// DisableNotify turns off the PostgreSQL LISTEN connection that wakes
	// candidates when the leader resigns (behind a pooler that cannot hold
	// a session); candidates then poll. Defaults to false.
	DisableNotify bool
}

// Election is one candidate in the election called name: it campaigns,
// holds at most one term at a time, proclaims, resigns, and reads and
// observes the leader. Create one per candidate (each has its own
// identity); it is safe for concurrent use.
type Election struct {
	name   string
	db     *store.DB
	cfg    Config
	log    *slog.Logger
	locker *optimistic.Locker

	campaigning chan struct{} // One Campaign at a time (a semaphore that respects ctx).

	mu   sync.Mutex
	term *dblock.Lease // The term this candidate holds or last held.

	closing   chan struct{}
	closeOnce sync.Once
	observers sync.WaitGroup
}

// New returns a candidate for the election called name on db, which stays
// the caller's. Names follow dblock.ValidateName; the election is the lock
// row of that name, so `dblock status` lists its leader and the reaper
// frees an expired term. Configuration errors wrap dblock.ErrInvalidOption.
func New(db *dialect.DB, name string, cfg *Config) (*Election, error) {
	if err := dblock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("election: new: %w", err)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.fill(); err != nil {
		return nil, err
	}
	l, err := optimistic.New(db, &optimistic.Config{Logger: c.Logger, Hooks: c.Hooks, Telemetry: c.Telemetry,
		DisableNotify: c.DisableNotify})
	if err != nil {
		return nil, fmt.Errorf("election: new: %w", err)
	}
	return &Election{name: name, db: store.Of(db), cfg: c, log: mode.Logger(c.Logger), locker: l,
		campaigning: make(chan struct{}, 1), closing: make(chan struct{})}, nil
}

// fill checks c and sets its defaults.
func (c *Config) fill() error {
	if c.TTL == 0 {
		c.TTL = dblock.TTLDefault
	}
	if c.TTL < dblock.TTLMin || c.TTL > dblock.TTLMax {
		return fmt.Errorf("election: new: %w: TTL %v is outside [%v, %v]", dblock.ErrInvalidOption, c.TTL, dblock.TTLMin, dblock.TTLMax)
	}
	if c.ObserveInterval < 0 || c.ResignTimeout < 0 {
		return fmt.Errorf("election: new: %w: negative duration (observe interval %v, resign timeout %v)",
			dblock.ErrInvalidOption, c.ObserveInterval, c.ResignTimeout)
	}
	if c.ObserveInterval == 0 {
		c.ObserveInterval = ObserveIntervalDefault
	}
	if c.ResignTimeout == 0 {
		c.ResignTimeout = ResignTimeoutDefault
	}
	return nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits until this candidate is elected, and returns its term: a
// lease on the election's name, with the Lease contract (Done closes and
// Err says why when the term is lost; Release resigns). Its Token is the
// term number, greater than every earlier term of the election, and
// fences the leader's writes as any lease token does. value is the
// leader's value, read by Leader and Observe (empty is allowed).
//
// A term is returned only while it holds: it was won by the database's
// clock, and its local deadline (request start + TTL) has not passed. If
// this candidate already holds a live term, Campaign proclaims value and
// returns that term; concurrent calls on one Election run one after the
// other, so they end with the same term. The wait ends with ctx; the error
// then wraps dblock.ErrNotAcquired and the cause, as the lock modes'
// Acquire does.
func (e *Election) Campaign(ctx context.Context, value string) (*dblock.Lease, error) {
	select {
	case e.campaigning <- struct{}{}:
		defer func() { <-e.campaigning }()
	case <-ctx.Done():
		return nil, fmt.Errorf("election %q: campaign: %w: %w", e.name, dblock.ErrNotAcquired, context.Cause(ctx))
	}
	if term := e.current(); term != nil {
		if err := e.Proclaim(ctx, value); err == nil || !errors.Is(err, ErrNotLeader) {
			return term, err
		}
	}
	for {
		term, err := e.locker.Acquire(ctx, e.name, dblock.WithTTL(e.cfg.TTL), dblock.WithMetadata(value))
		if err != nil {
			return nil, fmt.Errorf("election %q: campaign: %w", e.name, err)
		}
		if term.Err() != nil {
			continue // Lost before it could be handed out: campaign again.
		}
		e.mu.Lock()
		e.term = term
		e.mu.Unlock()
		return term, nil
	}
}

// current returns the live term this candidate holds, or nil.
func (e *Election) current() *dblock.Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil || e.term.Err() != nil {
		return nil
	}
	return e.term
}

// Proclaim changes the leader's value, if this candidate holds a live
// term; otherwise it returns an error wrapping ErrNotLeader. A term found
// lost by Proclaim is marked lost (its Done closes).
func (e *Election) Proclaim(ctx context.Context, value string) error {
	term := e.current()
	if term == nil {
		return fmt.Errorf("election %q: proclaim: %w", e.name, ErrNotLeader)
	}
	ok, err := e.db.SetLeaseMetadata(ctx, nil, e.name, term.Owner(), term.Token(), value)
	if err != nil {
		return fmt.Errorf("election %q: proclaim: %w", e.name, err)
	}
	if ok {
		return nil
	}
	return fmt.Errorf("election %q: proclaim: %w: %w", e.name, ErrNotLeader, e.markLost(ctx, term))
}

// markLost has the term's Locker find out why the term no longer holds (it
// reads the row through optimistic's Guard, which marks the lease lost with
// the reason) and returns the term's loss.
func (e *Election) markLost(ctx context.Context, term *dblock.Lease) error {
	tx, end, err := e.db.BeginPinned(ctx, nil)
	if err == nil {
		err = e.locker.Guard(ctx, tx, term)
		end()
	}
	if lost := term.Err(); lost != nil {
		return lost
	}
	return err
}

// Resign ends this candidate's term and hands the office over at once
// (candidates waiting on PostgreSQL are woken by the release; elsewhere
// they poll). It reports whether this candidate was still the leader: false,
// with a nil error, when it held no term or its term was already lost (the
// office was no longer its to give). An error means the outcome is unknown:
// the term ends at its deadline at the latest.
func (e *Election) Resign(ctx context.Context) (bool, error) {
	e.mu.Lock()
	term := e.term
	e.term = nil
	e.mu.Unlock()
	if term == nil {
		return false, nil
	}
	err := term.Release(ctx)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, dblock.ErrLost), errors.Is(err, dblock.ErrReleased):
		return false, nil
	}
	return false, fmt.Errorf("election %q: resign: %w", e.name, err)
}

// Close resigns this candidate's term, if any (bounded by
// Config.ResignTimeout), ends its observers, and releases its resources.
// Calling it again does nothing.
func (e *Election) Close() error {
	var err error
	e.closeOnce.Do(func() {
		close(e.closing)
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.ResignTimeout)
		defer cancel()
		_, rerr := e.Resign(ctx)
		err = errors.Join(rerr, e.locker.Close())
		e.observers.Wait()
	})
	return err
}
