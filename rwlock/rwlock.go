package rwlock

import (
	"context"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/fairgate"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
	_ "github.com/dblock-go/dblock/optimistic" // The write side's engine (leasemode.NewWriter).
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
	// WantForMin is the shortest time a waiting writer keeps new readers
	// out after each of its tries (it is at least four times PollMax).
	WantForMin = time.Second
)

// ErrUpgrade is the refusal of the write lock to an owner that holds the
// read lock of the name (it would wait for itself): release the read lock
// first. The error also wraps dblock.ErrNotAcquired.
var ErrUpgrade = leasemode.ErrUpgrade

// Config configures a Locker. The zero value (or a nil *Config) means defaults.
type Config struct {
	// Logger receives state changes at Debug and renewal retries and lost
	// leases at Warn. Defaults to none.
	Logger *slog.Logger
	// Hooks observe acquisitions, releases and losses of both sides.
	Hooks *dblock.Hooks
	// Telemetry chooses where metrics and spans go (modes "read" and
	// "write"). Defaults to the global OpenTelemetry providers.
	Telemetry *telemetry.Config
	// PollMin is a waiter's first backoff step; the step doubles up to
	// PollMax and is jittered. Defaults to PollMinDefault.
	PollMin time.Duration
	// PollMax caps a waiter's backoff. Defaults to PollMaxDefault.
	PollMax time.Duration
	// ReleaseTimeout bounds the release run by Do and by Close for every
	// lease still held, and each attempt of any release. Defaults to
	// ReleaseTimeoutDefault.
	ReleaseTimeout time.Duration
	// StatementTimeout bounds each acquire statement or transaction
	// (statements that begin within a tenth of it of each other share one
	// deadline, so each is given between nine tenths of it and all of it).
	// Defaults to StatementTimeoutDefault.
	StatementTimeout time.Duration
	// DisableNotify turns off the PostgreSQL LISTEN connections (waiters
	// then rely on backoff and expiry only).
	DisableNotify bool
	// Fair serves the waiting readers and writers of this Locker, and of
	// every fair Locker on the database, in arrival order: they queue in
	// dblock_waiters with fairqueue's waiters, a writer behind everyone who
	// came before it, a reader behind the writers who came before it
	// (readers queued together go in together). A call that finds nobody
	// in its way tries at once and queues only when refused; an owner that
	// holds the name already (a re-entry, a downgrade, an upgrade refusal)
	// never queues. Non-fair callers of the name are not held back by the
	// queue. Defaults to false: readers and writers race, and a waiting
	// writer keeps new readers out.
	Fair bool
}

// Locker takes the read and write locks of names in dblock_locks, the
// namespace every mode shares. It is safe for concurrent use; create one
// per database and share it.
type Locker struct {
	db     *store.DB
	cfg    Config
	writer leasemode.Writer
	parts  leasemode.Parts // The read side's.
	gate   *fairgate.Gate  // With Config.Fair, nil otherwise.
}

var _ dblock.Locker = (*Locker)(nil)

// New returns a Locker on db. db stays the caller's: Close does not close it.
// Configuration errors wrap dblock.ErrInvalidOption.
func New(handle *dialect.DB, cfg *Config) (*Locker, error) {
	db, err := leasemode.Store(handle, "rwlock")
	if err != nil {
		return nil, err
	}
	c, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	w, err := leasemode.NewWriter(handle, leasemode.WriterConfig{
		Logger: c.Logger, Hooks: c.Hooks, Telemetry: c.Telemetry, PollMin: c.PollMin, PollMax: c.PollMax,
		ReleaseTimeout: c.ReleaseTimeout, StatementTimeout: c.StatementTimeout, DisableNotify: c.DisableNotify,
		WantFor: max(WantForMin, 4*c.PollMax),
	})
	if err != nil {
		return nil, err
	}
	p, err := leasemode.New(db, leasemode.Wiring{
		Prefix: "rwlock", Mode: dblock.ModeRead, Logger: c.Logger, Hooks: c.Hooks, Telemetry: c.Telemetry,
		DisableNotify: c.DisableNotify,
		Keeper:        leasekeeper.Config{RetryMin: c.PollMin, ReleaseTimeout: c.ReleaseTimeout},
	})
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	l := &Locker{db: db, cfg: c, writer: w, parts: p}
	if c.Fair {
		l.gate = &fairgate.Gate{Prefix: "rwlock", Parts: p, PollMin: c.PollMin, PollMax: c.PollMax,
			StatementTimeout: c.StatementTimeout, ReleaseTimeout: c.ReleaseTimeout}
	}
	return l, nil
}

// resolve fills cfg's defaults and refuses bad values.
func resolve(cfg *Config) (Config, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	t, err := leasemode.Timing{PollMin: c.PollMin, PollMax: c.PollMax, ReleaseTimeout: c.ReleaseTimeout, StatementTimeout: c.StatementTimeout}.Resolve("rwlock")
	c.PollMin, c.PollMax, c.ReleaseTimeout, c.StatementTimeout = t.PollMin, t.PollMax, t.ReleaseTimeout, t.StatementTimeout
	return c, err
}

// Acquire takes the write lock of name, waiting while anyone else holds
// it (readers, or an exclusive holder of any mode). While it waits, new
// readers are refused, so a steady stream of readers cannot starve it. The
// lease's token is greater than every earlier token of the name. An owner
// that holds the read lock is refused at once with ErrUpgrade. The wait
// ends with ctx or dblock.WithWait, with an error wrapping
// dblock.ErrNotAcquired and the cause. With Config.Fair it waits its turn
// in arrival order first.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	if l.gate != nil {
		return l.fairWrite(ctx, name, true, opts)
	}
	return l.writer.Acquire(ctx, name, opts...)
}

// TryAcquire takes the write lock of name if nobody holds it (or the owner
// holds it already: a re-entry), and otherwise returns at once an error
// wrapping dblock.ErrNotAcquired naming the holder. It is also refused
// while another owner's waiting writer (or optimistic waiter) reserved the
// free name (see package optimistic), and with Config.Fair while fair
// waiters queue for the name.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	if l.gate != nil {
		return l.fairWrite(ctx, name, false, opts)
	}
	return l.writer.TryAcquire(ctx, name, opts...)
}

// fairWrite is a write in arrival order (Config.Fair), recorded as one
// acquisition of the write side, the wait in the queue included.
func (l *Locker) fairWrite(ctx context.Context, name string, wait bool, opts []dblock.Option) (*dblock.Lease, error) {
	ctx, call := l.writer.Recorder().BeginAcquire(ctx, name, wait)
	lease, err := l.gate.Acquire(ctx, "rwlock: acquire", name, store.WaitExclusive, wait, opts,
		func(ctx context.Context, wait bool, start time.Time) (*dblock.Lease, error) {
			return l.writer.Take(ctx, name, wait, start, opts)
		})
	call.End(lease, err)
	return lease, err
}

// Do takes the write lock of name (waiting like Acquire), runs fn with a
// context cancelled if the lease is lost, and releases.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	if l.gate != nil {
		return mode.Do(ctx, l.writer.Recorder(), l.Acquire, name, opts, l.cfg.ReleaseTimeout, fn)
	}
	return l.writer.Do(ctx, name, fn, opts...)
}

// DoRead takes the read lock of name (waiting like AcquireRead), runs fn
// with a context cancelled if the lease is lost, and releases.
func (l *Locker) DoRead(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	return mode.Do(ctx, l.parts.Events.Recorder(), l.AcquireRead, name, opts, l.cfg.ReleaseTimeout, fn)
}

// Close ends waits in progress with dblock.ErrClosed, ends every lease still
// held through l (read and write) and frees them, and stops the watchdogs
// and wake-up connections. Calling it again does nothing.
func (l *Locker) Close() error {
	if !l.parts.Life.BeginClose() {
		return nil
	}
	return errjoin.Join(l.writer.Close(), l.parts.Close("rwlock"))
}
