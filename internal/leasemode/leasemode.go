package leasemode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/internal/wake"
	"github.com/dblock-go/dblock/telemetry"
)

// Wiring is what a lease mode's New asks for.
type Wiring struct {
	// Prefix names the mode in errors and logs ("optimistic").
	Prefix string
	// Mode is the mode's name on its leases and telemetry (dblock.ModeOptimistic).
	Mode string
	// Telemetry is the Config's (nil: the global providers).
	Telemetry *telemetry.Config
	// Logger and Hooks are the Config's (nil: silent, none).
	Logger *slog.Logger
	Hooks  *dblock.Hooks
	// DisableNotify turns PostgreSQL's wake-ups off.
	DisableNotify bool
	// Keeper configures the leases' Keeper; New fills its DB, Prefix,
	// Logger and Events.
	Keeper leasekeeper.Config
}

// Parts are a lease mode's shared pieces, built by New.
type Parts struct {
	DB     *store.DB
	Logger *slog.Logger
	Events obs.Events // The Config's hooks and the mode's instruments.
	Keeper *leasekeeper.Keeper
	Hub    *wake.Hub // nil when notifications are off or unsupported.
	Life   *Life
}

// Store returns the store behind handle, or an error wrapping
// dblock.ErrInvalidOption for a nil handle.
func Store(handle *dialect.DB, prefix string) (*store.DB, error) {
	db := store.Of(handle)
	if db == nil || db.DB == nil || db.Dialect == nil {
		return nil, fmt.Errorf("%s: new: %w: nil database", prefix, dblock.ErrInvalidOption)
	}
	return db, nil
}

// New builds the shared pieces on db (see Store). Its error, a bad
// telemetry option, wraps dblock.ErrInvalidOption.
func New(db *store.DB, w Wiring) (Parts, error) {
	rec, err := obs.New(w.Telemetry, string(db.Dialect.Kind()), w.Mode)
	if err != nil {
		return Parts{}, fmt.Errorf("%s: new: %w", w.Prefix, err)
	}
	p := Parts{DB: db, Logger: mode.Logger(w.Logger), Life: &Life{Closing: make(chan struct{})},
		Events: obs.NewEvents(w.Hooks, rec)}
	kc := w.Keeper
	kc.DB, kc.Prefix, kc.Logger, kc.Events = db, w.Prefix, p.Logger, p.Events
	p.Keeper = leasekeeper.New(kc)
	if !w.DisableNotify && db.Dialect.Caps().Notify {
		p.Hub = wake.New(db, p.Logger)
	}
	return p, nil
}

// Close stops the Keeper (ending the leases still held as lost, and
// freeing their rows) and the hub, joining their errors under prefix.
func (p Parts) Close(prefix string) error {
	errs := []error{p.Keeper.Close()}
	if p.Hub != nil {
		errs = append(errs, p.Hub.Close())
	}
	if err := errjoin.Join(errs...); err != nil {
		return fmt.Errorf("%s: close: %w", prefix, err)
	}
	return nil
}

// Life is a Locker's open or closed state: Closing is closed by the first
// Close, which ends the waits in progress.
type Life struct {
	Closing chan struct{}

	mu     sync.Mutex
	closed bool
	waits  sync.WaitGroup // Calls in progress that Close waits for.
}

// Enter registers a call that Close waits for; false after Close. Leave
// ends it.
func (l *Life) Enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.waits.Add(1)
	return true
}

// Leave ends a call Enter registered.
func (l *Life) Leave() { l.waits.Done() }

// Closed reports whether Close has begun.
func (l *Life) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// BeginClose marks the Locker closed and closes Closing, then waits for the
// calls registered by Enter. It reports false when Close had begun already.
func (l *Life) BeginClose() bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.closed = true
	close(l.Closing)
	l.mu.Unlock()
	l.waits.Wait()
	return true
}

// WriterConfig configures the write side of a read-write lock: an
// optimistic Locker whose leases are of mode ModeWrite and whose waits
// keep new readers out (package rwlock).
type WriterConfig struct {
	Logger                           *slog.Logger
	Hooks                            *dblock.Hooks
	Telemetry                        *telemetry.Config
	PollMin, PollMax                 time.Duration
	ReleaseTimeout, StatementTimeout time.Duration
	DisableNotify                    bool
	// WantFor is how long, by the database clock, a refused writer keeps
	// new readers out; a waiting writer renews it on every try.
	WantFor time.Duration
}

// Writer is the write side built by NewWriter.
type Writer interface {
	dblock.Locker
	Close() error
	// Recorder is the write side's instruments (mode "write").
	Recorder() *obs.Recorder
	// Take is Acquire (wait) or TryAcquire, unrecorded, for a call that
	// began at start (a fair write, recorded by rwlock around its queue).
	Take(ctx context.Context, name string, wait bool, start time.Time, opts []dblock.Option) (*dblock.Lease, error)
}

// NewWriter builds the write side of a read-write lock; package optimistic
// sets it in its init (rwlock imports optimistic, so it is always set).
var NewWriter func(handle *dialect.DB, c WriterConfig) (Writer, error)

// ErrUpgrade is the refusal of a write lock to an owner that holds the
// read lock of the name: it would wait for itself (rwlock.ErrUpgrade).
var ErrUpgrade = errors.New("the owner holds the read lock of the name; it cannot wait for the write lock (release the read lock first)")
