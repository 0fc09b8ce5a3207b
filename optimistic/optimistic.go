package optimistic

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/internal/wake"
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

// Config configures a Locker. The zero value (or a nil *Config) means defaults.
type Config struct {
	// Logger receives state changes at Debug and renewal retries and lost
	// leases at Warn. Defaults to none: the library logs nothing unless given a logger.
	Logger *slog.Logger
	// Hooks observe acquisitions, releases and losses. Defaults to none.
	Hooks *dblock.Hooks
	// Telemetry chooses where metrics and spans go. Defaults to the
	// global OpenTelemetry providers (recording nothing unless the
	// application installed an SDK).
	Telemetry *telemetry.Config
	// PollMin is a waiter's first backoff step; the step doubles up to
	// PollMax and is jittered. Defaults to PollMinDefault.
	PollMin time.Duration
	// PollMax caps a waiter's backoff. Defaults to PollMaxDefault.
	PollMax time.Duration
	// ReleaseTimeout bounds the release run by Do after fn returns and by
	// Close for every lease still held, and each attempt of any release (a
	// Release whose ctx has no deadline still gives up a connection that
	// stops answering, and retries on another until the lease's deadline).
	// Defaults to ReleaseTimeoutDefault.
	ReleaseTimeout time.Duration
	// StatementTimeout bounds each acquire statement and each read of a
	// waiter (statements that begin within a tenth of it of each other
	// share one deadline, so each is given between nine tenths of it and
	// all of it). The acquire statement is not
	// cut short when ctx ends: a statement cancelled in flight may have
	// taken the lock without the caller knowing, leaving the name held until
	// the lease expires. A cancelled wait therefore returns after at most
	// the statement in progress. Defaults to StatementTimeoutDefault.
	StatementTimeout time.Duration
	// DisableNotify turns off the PostgreSQL LISTEN connection, so waiters
	// rely on backoff and the holder's expiry only (for example behind a
	// pooler that cannot hold a session). Defaults to false.
	DisableNotify bool
}

// Locker acquires lease locks on the dblock_locks table. It is safe for
// concurrent use; create one per database and share it.
type Locker struct {
	db     *store.DB
	cfg    Config
	logger *slog.Logger
	events obs.Events
	rec    *obs.Recorder
	hub    *wake.Hub         // nil when notifications are off or unsupported.
	gates  *gates            // This Locker's waiters, in line per name.
	kick   func(name string) // gates.kick, made once for every lease's OnReleased.
	rows   leasekeeper.Rows  // Every lease's statements: lineRows, boxed once.
	keeper *leasekeeper.Keeper
	parts  leasemode.Parts
	life   *leasemode.Life // Closed by Close.
	mode   string          // dblock.ModeOptimistic, or ModeWrite for an rwlock's write side.
	prefix string          // "optimistic" or "rwlock", in errors and logs.
	// writer is set on an rwlock's write side (see writer.go): a refusal by
	// readers marks the name wanted, and a read holder of the owner is told
	// it cannot take the write lock.
	writer *writerSide
}

var _ dblock.Locker = (*Locker)(nil)

// New returns a Locker on db. db stays the caller's: Close does not close it.
// Configuration errors wrap dblock.ErrInvalidOption.
func New(handle *dialect.DB, cfg *Config) (*Locker, error) {
	return newLocker(handle, cfg, "optimistic", dblock.ModeOptimistic)
}

// newLocker is New for a mode's name in errors (prefix) and rows (mode).
func newLocker(handle *dialect.DB, cfg *Config, prefix, modeName string) (*Locker, error) {
	db, err := leasemode.Store(handle, prefix)
	if err != nil {
		return nil, err
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	t, err := leasemode.Timing{PollMin: c.PollMin, PollMax: c.PollMax, ReleaseTimeout: c.ReleaseTimeout, StatementTimeout: c.StatementTimeout}.Resolve(prefix)
	if err != nil {
		return nil, err
	}
	c.PollMin, c.PollMax, c.ReleaseTimeout, c.StatementTimeout = t.PollMin, t.PollMax, t.ReleaseTimeout, t.StatementTimeout
	p, err := leasemode.New(db, leasemode.Wiring{
		Prefix: prefix, Mode: modeName, Logger: c.Logger, Hooks: c.Hooks, Telemetry: c.Telemetry,
		DisableNotify: c.DisableNotify,
		Keeper:        leasekeeper.Config{RetryMin: c.PollMin, ReleaseTimeout: c.ReleaseTimeout},
	})
	if err != nil {
		return nil, err
	}
	hands := db.HandsOverLeases() && modeName == dblock.ModeOptimistic
	l := &Locker{parts: p, db: db, cfg: c, logger: p.Logger, events: p.Events, rec: p.Events.Recorder(),
		keeper: p.Keeper, hub: p.Hub, life: p.Life, gates: newGates(hands), mode: modeName, prefix: prefix}
	l.kick = l.gates.kick
	l.rows = lineRows{Rows: leasekeeper.Exclusive(db), db: db, gates: l.gates}
	return l, nil
}

// Acquire takes name, waiting while another owner holds it: on PostgreSQL a
// release wakes it at once, and everywhere it re-checks at the holder's
// expiry and on a capped, jittered backoff. The wait ends with ctx or
// dblock.WithWait; the error then wraps dblock.ErrNotAcquired (through a
// *dblock.HeldError naming the holder) and context.Cause(ctx).
func (l *Locker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	ctx, call := l.rec.BeginAcquire(ctx, name, true)
	lease, err := l.acquire(ctx, name, true, opts)
	call.End(lease, err)
	return lease, err
}

// TryAcquire takes name if it is free, expired or already this owner's, and
// otherwise returns at once an error wrapping dblock.ErrNotAcquired with a
// *dblock.HeldError naming the holder. A free or expired name that another
// owner's waiter reserved (see the package doc, "Waiting") is refused too,
// the error's cause saying so. It never waits for a row lock: a name held
// by a pessimistic transaction is reported as held.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	ctx, call := l.rec.BeginAcquire(ctx, name, false)
	lease, err := l.acquire(ctx, name, false, opts)
	call.End(lease, err)
	return lease, err
}

// Do acquires name (waiting like Acquire), runs fn with a context cancelled
// with the *dblock.LostError as cause if the lease is lost, and then releases,
// bounded by Config.ReleaseTimeout even when ctx is done. It returns fn's
// error, joined with the loss when the lease was lost while fn ran.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	return mode.Do(ctx, l.rec, l.Acquire, name, opts, l.cfg.ReleaseTimeout, fn)
}

// Close ends waits in progress with dblock.ErrClosed, ends every lease still held
// through l and frees its row (bounded by Config.ReleaseTimeout), stops the
// watchdogs and the wake-up connection, and returns when they have stopped.
// Calling it again does nothing.
//
// A lease ended by Close is lost to its holder: Done closes, Err wraps
// dblock.ErrLost and dblock.ErrClosed, and the context of a Do running under it is
// cancelled with that error as its cause, before the row is freed.
func (l *Locker) Close() error {
	if !l.life.BeginClose() {
		return nil
	}
	return l.parts.Close("optimistic")
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool, opts []dblock.Option) (lease *dblock.Lease, err error) {
	return l.acquireSince(ctx, name, wait, time.Now(), opts)
}

// acquireSince is acquire for a call that began at start (its wait, as
// hooks and instruments see it, counts from there).
func (l *Locker) acquireSince(ctx context.Context, name string, wait bool, start time.Time, opts []dblock.Option) (lease *dblock.Lease, err error) {
	c, err := mode.BeginOne(ctx, l.prefix+": acquire", name, wait, opts)
	if err != nil {
		return nil, err
	}
	if l.isClosed() {
		return nil, fmt.Errorf(l.prefix+": acquire %q: %w: %w", name, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	o := c.Opts
	a := &acquisition{
		l: l, ctx: ctx, name: name, o: o, wait: c.Wait, start: start, backoff: l.cfg.PollMin,
		params:      store.AcquireParams{Name: name, Owner: o.Owner, Mode: l.mode, TTL: o.FirstTTL(), Metadata: o.Metadata},
		unsubscribe: func() {},
	}
	var cancel context.CancelFunc
	a.waitCtx, cancel = c.WaitContext(ctx)
	defer cancel()
	defer func() { a.leaveLine(lease) }()
	return a.run()
}

// gaveUp is the error of a wait that ended (cause) while the call waited
// for its turn in the Locker's line: the holder is the one the head last saw.
func (l *Locker) gaveUp(name string, p *pending, lastErr, cause error) error {
	if p != nil || lastErr != nil {
		return l.waitEnded(name, p, lastErr, cause)
	}
	return fmt.Errorf(l.prefix+": acquire %q: %w", name, l.gates.holder(name).HeldError(name, cause))
}

// pending is an acquire whose connection broke: it may have committed.
type pending struct {
	name, owner string
	handles     map[dblock.Token]int // This Locker's live handles on the name for the owner, before it.
	reqStart    time.Time
	err         error
}

// settle reads the row of an acquire with an unknown outcome, on a fresh
// connection, bounded by StatementTimeout (leasekeeper.ReadBack: each try
// by a fifth of it). If the row names the owner with one more entry than
// this Locker's handles on it, the lost statement took the lock and
// settle returns its lease, which the caller returns. If not, the acquire
// did not take effect (settled). If the row cannot be read, neither.
func (l *Locker) settle(ctx context.Context, p *pending, o mode.Options, start time.Time) (*dblock.Lease, bool, error) {
	var h store.Holder
	read := func(ctx context.Context) (err error) {
		h, err = l.db.LeaseHolder(ctx, nil, p.name)
		return err
	}
	if err := leasekeeper.ReadBack(ctx, l.cfg.StatementTimeout, l.cfg.PollMin, l.cfg.PollMax, read); err != nil {
		return nil, false, nil
	}
	token := dblock.Token(h.Version)
	if !h.Held() || h.Owner != p.owner || h.Reentry <= p.handles[token] {
		return nil, true, nil
	}
	l.logger.LogAttrs(ctx, slog.LevelInfo, l.prefix+": acquire with a lost answer had taken the lock; keeping it",
		slog.String("lock_key", p.name), slog.String("owner", p.owner), slog.Int64("token", h.Version), slog.String("error", p.err.Error()))
	res := store.AcquireResult{Acquired: true, Token: token, Reentry: h.Reentry}
	lease, err := l.newLease(p.name, o, res, p.reqStart, time.Since(start))
	return lease, true, err
}

// unresolved is the error of an acquire whose outcome could not be settled.
func (l *Locker) unresolved(p *pending) error {
	return fmt.Errorf(l.prefix+": acquire %q: outcome unknown, the name may be held by owner %q until its lease expires: %w",
		p.name, p.owner, p.err)
}

// waitEnded is the error of a wait that ended (cause) while an acquire's
// outcome was unknown (p), or after the last attempt failed (lastErr): not
// "not acquired", since the database could not say.
func (l *Locker) waitEnded(name string, p *pending, lastErr, cause error) error {
	if p != nil {
		return fmt.Errorf("%w (wait ended: %w)", l.unresolved(p), cause)
	}
	if lastErr != nil {
		return fmt.Errorf(l.prefix+": acquire %q: the last attempt failed: %w (wait ended: %w)", name, lastErr, cause)
	}
	return fmt.Errorf(l.prefix+": acquire %q: %w: %w", name, dblock.ErrNotAcquired, cause)
}

// handles counts this Locker's live handles on name for owner, per token.
func (l *Locker) handles(name, owner string) map[dblock.Token]int {
	return l.keeper.HandlesOf(name, owner)
}

// transient reports whether an acquire error is worth retrying while waiting.
func transient(err error) bool { return leasekeeper.Transient(err) }

func (l *Locker) isClosed() bool { return l.life.Closed() }

func (l *Locker) newLease(name string, o mode.Options, res store.AcquireResult, reqStart time.Time, waited time.Duration) (*dblock.Lease, error) {
	lease, err := l.keeper.Start(leasekeeper.Params{
		Name: name, Owner: o.Owner, Mode: l.mode, Token: res.Token, TTL: o.TTL, MaxHold: o.MaxHold, MinHold: o.MinHold,
		ReqStart: reqStart, Reentry: res.Reentry,
		// The next in this Locker's line asks at once, without waiting for
		// the notification (or, without one, its backoff).
		OnReleased: l.kick,
		Rows:       l.rows,
	})
	if err != nil {
		return nil, fmt.Errorf(l.prefix+": acquire %q: %w: %w", name, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	if l.logger.Enabled(context.Background(), slog.LevelDebug) { // Attributes are built only when wanted.
		l.logger.LogAttrs(context.Background(), slog.LevelDebug, l.prefix+": acquired",
			slog.String("lock_key", name), slog.String("owner", o.Owner), slog.Int64("token", int64(res.Token)))
	}
	l.events.Acquired(name, o.Owner, res.Token, waited)
	return lease, nil
}

// jitter spreads a pause over [d/2, d] (backoff.Jitter).
var jitter = backoff.Jitter
