package semaphore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/fairgate"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/telemetry"
)

// Defaults of Config.
const (
	// PollMinDefault is the first backoff step of a waiter.
	PollMinDefault = 5 * time.Millisecond
	// PollMaxDefault caps a waiter's backoff.
	PollMaxDefault = 250 * time.Millisecond
	// ReleaseTimeoutDefault bounds the release that Do and Close run.
	ReleaseTimeoutDefault = 5 * time.Second
	// StatementTimeoutDefault bounds one acquire statement.
	StatementTimeoutDefault = 10 * time.Second
)

// ErrLimitMismatch is the refusal of a caller that names another limit
// than the semaphore has (it also wraps dblock.ErrInvalidOption): a limit
// changes only through SetLimit.
var ErrLimitMismatch = store.ErrLimitMismatch

// Config configures a Locker. The zero value (or a nil *Config) means defaults.
type Config struct {
	// Logger receives state changes at Debug and renewal retries and lost
	// leases at Warn. Defaults to none.
	Logger *slog.Logger
	// Hooks observe grants (as acquisitions), releases and losses.
	Hooks *dblock.Hooks
	// Telemetry chooses where metrics and spans go (mode "semaphore").
	Telemetry *telemetry.Config
	// PollMin is a waiter's first backoff step; the step doubles up to
	// PollMax and is jittered. Defaults to PollMinDefault.
	PollMin time.Duration
	// PollMax caps a waiter's backoff. Defaults to PollMaxDefault.
	PollMax time.Duration
	// ReleaseTimeout bounds the release run by Do and by Close for every
	// grant still held, and each attempt of any release.
	ReleaseTimeout time.Duration
	// StatementTimeout bounds each acquire transaction (statements that
	// begin within a tenth of it of each other share one deadline, so each
	// is given between nine tenths of it and all of it).
	StatementTimeout time.Duration
	// DisableNotify turns off the PostgreSQL LISTEN connection.
	DisableNotify bool
	// Fair grants the waiting requests of this Locker, and of every fair
	// Locker on the database, in arrival order, so that a large request is
	// not starved by small ones: they queue in dblock_waiters (apart from
	// the locks of the same name), and a request waits for every earlier
	// one of its semaphore to be granted or to give up. A request that
	// finds nobody queued tries at once and queues only when refused.
	// Non-fair requests are not held back by the queue. Defaults to false:
	// requests race, and whichever fits when permits come back is granted.
	Fair bool
}

// Locker grants the permits of named semaphores. It is safe for concurrent
// use; create one per database and share it.
type Locker struct {
	db    *store.DB
	cfg   Config
	parts leasemode.Parts
	gate  *fairgate.Gate // With Config.Fair, nil otherwise.
}

// New returns a Locker on db. db stays the caller's: Close does not close
// it. Configuration errors wrap dblock.ErrInvalidOption.
func New(handle *dialect.DB, cfg *Config) (*Locker, error) {
	db, err := leasemode.Store(handle, "semaphore")
	if err != nil {
		return nil, err
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	t, err := leasemode.Timing{PollMin: c.PollMin, PollMax: c.PollMax, ReleaseTimeout: c.ReleaseTimeout, StatementTimeout: c.StatementTimeout}.Resolve("semaphore")
	if err != nil {
		return nil, err
	}
	c.PollMin, c.PollMax, c.ReleaseTimeout, c.StatementTimeout = t.PollMin, t.PollMax, t.ReleaseTimeout, t.StatementTimeout
	p, err := leasemode.New(db, leasemode.Wiring{
		Prefix: "semaphore", Mode: dblock.ModeSemaphore, Logger: c.Logger, Hooks: c.Hooks, Telemetry: c.Telemetry,
		DisableNotify: c.DisableNotify,
		Keeper:        leasekeeper.Config{RetryMin: c.PollMin, ReleaseTimeout: c.ReleaseTimeout},
	})
	if err != nil {
		return nil, err
	}
	l := &Locker{db: db, cfg: c, parts: p}
	if c.Fair {
		l.gate = &fairgate.Gate{Prefix: "semaphore", Parts: p, PollMin: c.PollMin, PollMax: c.PollMax,
			StatementTimeout: c.StatementTimeout, ReleaseTimeout: c.ReleaseTimeout}
	}
	return l, nil
}

// Acquire takes permits of the semaphore name, whose limit is limit (the
// semaphore is created with it on first use), waiting until that many are
// free. The grant is a lease: renewed while held, freed by its Release or,
// when its holder dies, by its expiry by the database clock, with nobody
// calling. Its token is the grant's own id. A limit other than the
// semaphore's is an error wrapping ErrLimitMismatch; a limit below 1, or
// permits outside 1..limit, wrap dblock.ErrInvalidOption. The wait ends
// with ctx or dblock.WithWait, with an error wrapping dblock.ErrNotAcquired
// and the cause. With Config.Fair it waits its turn in arrival order first.
func (l *Locker) Acquire(ctx context.Context, name string, limit, permits int, opts ...dblock.Option) (*dblock.Lease, error) {
	ctx, call := l.parts.Events.Recorder().BeginAcquire(ctx, name, true)
	lease, err := l.acquire(ctx, name, limit, permits, true, opts)
	call.End(lease, err)
	return lease, err
}

// TryAcquire takes permits of the semaphore name if that many are free
// now, and otherwise returns an error wrapping dblock.ErrNotAcquired (a
// *dblock.HeldError whose cause says how many are out). With Config.Fair
// it is also refused while fair requests queue for the semaphore.
func (l *Locker) TryAcquire(ctx context.Context, name string, limit, permits int, opts ...dblock.Option) (*dblock.Lease, error) {
	ctx, call := l.parts.Events.Recorder().BeginAcquire(ctx, name, false)
	lease, err := l.acquire(ctx, name, limit, permits, false, opts)
	call.End(lease, err)
	return lease, err
}

// Do takes permits (waiting like Acquire), runs fn with a context cancelled
// if the grant is lost, and releases them.
func (l *Locker) Do(ctx context.Context, name string, limit, permits int, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	acquire := func(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
		return l.Acquire(ctx, name, limit, permits, opts...)
	}
	return mode.Do(ctx, l.parts.Events.Recorder(), acquire, name, opts, l.cfg.ReleaseTimeout, fn)
}

// SetLimit sets the limit of the semaphore name (creating it if needed).
// Grants already out are kept when the limit drops below them; nobody is
// granted until the permits out are under the new limit.
func (l *Locker) SetLimit(ctx context.Context, name string, limit int) error {
	if err := validate(name, limit, 1); err != nil {
		return fmt.Errorf("semaphore: set limit: %w", err)
	}
	if err := l.db.SetSemaphoreLimit(ctx, name, limit); err != nil {
		return fmt.Errorf("semaphore: set limit %q: %w", name, err)
	}
	return nil
}

// State is a semaphore's limit and the permits out.
type State struct {
	// Exists is false for a semaphore never used (or removed by the reaper
	// once idle).
	Exists bool
	Limit  int
	// Used counts the permits of unexpired grants.
	Used int
}

// State reads the semaphore name.
func (l *Locker) State(ctx context.Context, name string) (State, error) {
	if err := dblock.ValidateName(name); err != nil {
		return State{}, fmt.Errorf("semaphore: state: %w", err)
	}
	st, err := l.db.SemaphoreOf(ctx, name)
	if err != nil {
		return State{}, fmt.Errorf("semaphore: state %q: %w", name, err)
	}
	return State{Exists: st.Exists, Limit: st.Limit, Used: st.Used}, nil
}

// Close ends waits in progress with dblock.ErrClosed, ends every grant still
// held through l and frees it, and stops the watchdogs and the wake-up
// connection. Calling it again does nothing.
func (l *Locker) Close() error {
	if !l.parts.Life.BeginClose() {
		return nil
	}
	return l.parts.Close("semaphore")
}

// validate checks a semaphore's name, limit and a request's permits.
func validate(name string, limit, permits int) error {
	if err := dblock.ValidateName(name); err != nil {
		return err
	}
	if limit < 1 {
		return fmt.Errorf("%w: semaphore %q: limit %d, want at least 1", dblock.ErrInvalidOption, name, limit)
	}
	if permits < 1 || permits > limit {
		return fmt.Errorf("%w: semaphore %q: %d permits, want 1 to the limit %d", dblock.ErrInvalidOption, name, permits, limit)
	}
	return nil
}
