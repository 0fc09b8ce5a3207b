package fairqueue

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/internal/recent"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/internal/wake"
	"github.com/dblock-go/dblock/telemetry"
)

// Defaults of Config.
const (
	// HeartbeatIntervalDefault is how often a waiter refreshes its row.
	HeartbeatIntervalDefault = 2 * time.Second
	// HeartbeatTimeoutDefault is how long a waiter's row stays live without a
	// heartbeat; a crashed waiter delays the queue by at most this much.
	HeartbeatTimeoutDefault = 10 * time.Second
	// PollMinDefault is the first backoff step of a waiter.
	PollMinDefault = 5 * time.Millisecond
	// HeadPollMaxDefault caps the backoff of the waiter at the head of the
	// queue, the only one that can take the lock next.
	HeadPollMaxDefault = 50 * time.Millisecond
	// PollMaxDefault caps the backoff of the waiters behind the head.
	PollMaxDefault = time.Second
	// ReleaseTimeoutDefault bounds the release that Do and Close run, and the
	// clean-up of a waiter that gives up.
	ReleaseTimeoutDefault = 5 * time.Second
)

// Config configures a Locker. The zero value (or a nil *Config) means defaults.
type Config struct {
	// Logger receives state changes at Debug and retries, re-queued waiters
	// and lost leases at Warn. Defaults to none: the library logs nothing unless given a logger.
	Logger *slog.Logger
	// Hooks observe acquisitions, releases and losses. Defaults to none.
	Hooks *dblock.Hooks
	// Telemetry chooses where metrics and spans go. Defaults to the
	// global OpenTelemetry providers (recording nothing unless the
	// application installed an SDK).
	Telemetry *telemetry.Config
	// HeartbeatInterval is how often a waiter refreshes its queue row.
	// Defaults to HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a waiter's row stays live after its last
	// heartbeat; past it the waiter is skipped by everyone and removed by the
	// reaper. At least 2 x HeartbeatInterval. Defaults to
	// max(HeartbeatTimeoutDefault, 2 x HeartbeatInterval).
	HeartbeatTimeout time.Duration
	// PollMin is a waiter's first backoff step; steps double and are jittered.
	// Where no notification announces the queue's moves (MySQL, SQLite,
	// DisableNotify), a waiter behind the head first sleeps PollMin per
	// place ahead. Defaults to PollMinDefault.
	PollMin time.Duration
	// HeadPollMax caps the backoff of the waiter at the head of the queue.
	// Defaults to HeadPollMaxDefault.
	HeadPollMax time.Duration
	// PollMax caps the backoff of waiters behind the head. Defaults to
	// PollMaxDefault.
	PollMax time.Duration
	// ReleaseTimeout bounds the release run by Do after fn returns, by Close
	// for every lease still held, and the removal of a waiter that gives up.
	// Defaults to ReleaseTimeoutDefault.
	ReleaseTimeout time.Duration
	// DisableNotify turns off the PostgreSQL LISTEN connection, so waiters
	// rely on backoff and the holder's expiry only (for example behind a
	// pooler that cannot hold a session). Defaults to false.
	DisableNotify bool
}

// validate fills defaults and checks cross-field rules.
func (c *Config) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"heartbeat interval", c.HeartbeatInterval}, {"heartbeat timeout", c.HeartbeatTimeout},
		{"poll min", c.PollMin}, {"head poll max", c.HeadPollMax}, {"poll max", c.PollMax},
		{"release timeout", c.ReleaseTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s %v is negative", dblock.ErrInvalidOption, d.name, d.v)
		}
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = HeartbeatIntervalDefault
	}
	if c.HeartbeatInterval < time.Millisecond {
		return fmt.Errorf("%w: heartbeat interval %v is under 1ms", dblock.ErrInvalidOption, c.HeartbeatInterval)
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = max(HeartbeatTimeoutDefault, 2*c.HeartbeatInterval)
	}
	if c.HeartbeatTimeout < 2*c.HeartbeatInterval {
		return fmt.Errorf("%w: heartbeat timeout %v is under twice the heartbeat interval %v",
			dblock.ErrInvalidOption, c.HeartbeatTimeout, c.HeartbeatInterval)
	}
	if c.PollMin == 0 {
		c.PollMin = PollMinDefault
	}
	if c.HeadPollMax == 0 {
		c.HeadPollMax = max(HeadPollMaxDefault, c.PollMin)
	}
	if c.PollMax == 0 {
		c.PollMax = max(PollMaxDefault, c.HeadPollMax)
	}
	if c.HeadPollMax < c.PollMin || c.PollMax < c.HeadPollMax {
		return fmt.Errorf("%w: want poll min %v <= head poll max %v <= poll max %v",
			dblock.ErrInvalidOption, c.PollMin, c.HeadPollMax, c.PollMax)
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = ReleaseTimeoutDefault
	}
	return nil
}

// Locker acquires fair (FIFO) lease locks. It is safe for concurrent use;
// create one per database and share it.
type Locker struct {
	db     *store.DB
	cfg    Config
	logger *slog.Logger
	events obs.Events
	rec    *obs.Recorder
	hub    *wake.Hub // nil when notifications are off or unsupported.
	keeper *leasekeeper.Keeper
	local  signals
	// line holds this Locker's queued waiters for its releases to hand
	// names to, and rows is its leases' Rows that do (handRows), where the
	// database hands over (store.DB.HandsOver); nil elsewhere.
	line line
	rows leasekeeper.Rows
	// onReleased tells this Locker's waiters of a release here (local),
	// for every lease's OnReleased.
	onReleased func(name string)
	contended  recent.Names // When each name last met a holder or a queue (see quiet.go).
	beats      beats
	bg         sync.WaitGroup // The heartbeat goroutine.
	// writeMu serialises this Locker's writes on SQLite (one writer per
	// database): waiting on a mutex hands over at once, where colliding on
	// the database lock backs off in sleeps of up to 100 ms.
	writeMu writeLock
	parts   leasemode.Parts
	life    *leasemode.Life // Closed by Close, which waits for the acquisitions it registered.

	stats struct {
		statements, acquired, enqueued, requeued, checks, heartbeats atomic.Uint64
	}
}

var _ dblock.Locker = (*Locker)(nil)

// New returns a Locker on db. db stays the caller's: Close does not close it.
// Configuration errors wrap dblock.ErrInvalidOption.
func New(handle *dialect.DB, cfg *Config) (*Locker, error) {
	db, err := leasemode.Store(handle, "fairqueue")
	if err != nil {
		return nil, err
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("fairqueue: new: %w", err)
	}
	l := &Locker{db: db, cfg: c}
	l.local.subs = map[string]map[*signal]struct{}{}
	l.onReleased = func(name string) { l.local.notify(name, eventRelease) }
	l.beats.ids = map[int64]struct{}{}
	l.line.names = map[string][]*slot{}
	l.line.handing = map[string]int{}
	if db.HandsOver() {
		l.rows = handRows{Rows: leasekeeper.Exclusive(db), l: l}
	}
	if !db.Dialect.Caps().RowLocks {
		l.writeMu = make(writeLock, 1)
	}
	p, err := leasemode.New(db, leasemode.Wiring{
		Prefix: "fairqueue", Mode: dblock.ModeFair, Logger: c.Logger, Hooks: c.Hooks, Telemetry: c.Telemetry,
		DisableNotify: c.DisableNotify,
		Keeper: leasekeeper.Config{RetryMin: c.PollMin, ReleaseTimeout: c.ReleaseTimeout,
			CountStatement: l.count, WriteMu: l.writeMu.locker()},
	})
	if err != nil {
		return nil, err
	}
	l.parts = p
	l.logger, l.events, l.rec, l.keeper, l.hub, l.life = p.Logger, p.Events, p.Events.Recorder(), p.Keeper, p.Hub, p.Life
	l.bg.Add(1)
	go l.heartbeat()
	return l, nil
}

// Stats are counters of a Locker since New.
type Stats struct {
	// Statements counts the round trips sent by acquisitions, waits,
	// releases and renewals (BEGIN, COMMIT and ROLLBACK included).
	Statements uint64
	// Acquired counts successful acquisitions.
	Acquired uint64
	// Enqueued counts waiters inserted into the queue.
	Enqueued uint64
	// Requeued counts waiters that found their row dead (heartbeat lapsed)
	// and enqueued again at the back.
	Requeued uint64
	// Checks counts am-I-next checks.
	Checks uint64
	// Heartbeats counts heartbeat statements (one per interval refreshes
	// every waiter of the Locker).
	Heartbeats uint64
}

// Stats returns the counters since New.
func (l *Locker) Stats() Stats {
	return Stats{
		Statements: l.stats.statements.Load(), Acquired: l.stats.acquired.Load(),
		Enqueued: l.stats.enqueued.Load(), Requeued: l.stats.requeued.Load(),
		Checks: l.stats.checks.Load(), Heartbeats: l.stats.heartbeats.Load(),
	}
}

func (l *Locker) count() { l.stats.statements.Add(1) }

// lockWrites holds the SQLite write mutex, if any, and returns its unlock.
func (l *Locker) lockWrites() func() {
	if l.writeMu == nil {
		return func() {}
	}
	l.writeMu.Lock()
	return l.writeMu.Unlock
}

// (Calls on their way to a lease take it through attempt.lockWrites, which
// gives up with their wait.)

// Acquire takes name in arrival order. When the name is free and nobody
// queues for it, it is taken at once without touching the queue; otherwise
// the caller joins the queue and waits until it is the oldest live waiter
// and the lock is free or expired. On PostgreSQL and MariaDB a release
// through the same Locker hands the name to its next waiter in the
// release's own statement, and on PostgreSQL a release elsewhere wakes the
// waiter that may be next at once; everywhere the head of the queue
// re-checks on a capped, jittered backoff and at the holder's expiry. The
// wait ends with ctx or dblock.WithWait; the error then wraps
// dblock.ErrNotAcquired and context.Cause(ctx), and the waiter's row is
// gone. An owner that already holds name re-enters it without waiting in
// the queue. A ctx from WithPositionFunc reports the waiter's place while
// it waits.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	ctx, call := l.rec.BeginAcquire(ctx, name, true)
	lease, err := l.acquire(ctx, name, true, opts)
	call.End(lease, err)
	return lease, err
}

// TryAcquire takes name only if nobody queues for it and it is free or
// expired (or already this owner's), and otherwise returns at once an error
// wrapping dblock.ErrNotAcquired. It never inserts a queue row.
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

// Close ends waits in progress with dblock.ErrClosed (their queue rows removed),
// ends every lease still held through l as lost (Err wraps dblock.ErrLost
// and dblock.ErrClosed; a running Do's fn has its context cancelled) and frees its
// row (bounded by Config.ReleaseTimeout), stops the watchdogs and the
// wake-up connection, and returns when they have stopped. Calling it again
// does nothing.
func (l *Locker) Close() error {
	if !l.life.BeginClose() {
		return nil
	}
	l.bg.Wait()
	return l.parts.Close("fairqueue")
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool, opts []dblock.Option) (*dblock.Lease, error) {
	c, err := mode.BeginOne(ctx, "fairqueue: acquire", name, wait, opts)
	if err != nil {
		return nil, err
	}
	if !l.life.Enter() {
		return nil, fmt.Errorf("fairqueue: acquire %q: %w: %w", name, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	defer l.life.Leave()
	o, wait := c.Opts, c.Wait
	waitCtx, cancel := c.WaitContext(ctx)
	defer cancel()
	a := &attempt{l: l, ctx: waitCtx, name: name, o: o, start: time.Now(),
		params: store.AcquireParams{Name: name, Owner: o.Owner, Mode: dblock.ModeFair, TTL: o.FirstTTL(), Metadata: o.Metadata}}
	if !wait || !l.queuesFirst(name) {
		lease, err := a.direct(wait)
		if lease != nil || err != nil {
			return lease, err
		}
	}
	return a.queue()
}

// attempt is one Acquire or TryAcquire call.
type attempt struct {
	l      *Locker
	ctx    context.Context // The caller's context bounded by the wait.
	name   string
	o      mode.Options
	start  time.Time
	params store.AcquireParams
}

func (a *attempt) attrs(extra ...slog.Attr) []slog.Attr {
	return append([]slog.Attr{slog.String("lock_key", a.name), slog.String("owner", a.o.Owner)}, extra...)
}

func (a *attempt) errorf(format string, args ...any) error {
	return fmt.Errorf("fairqueue: acquire %q: "+format, append([]any{a.name}, args...)...)
}

// stopped returns the error of a wait that ended (ctx, wait, Close), or nil.
func (a *attempt) stopped(h store.Holder) error {
	var cause error
	select {
	case <-a.ctx.Done():
		cause = context.Cause(a.ctx)
	case <-a.l.life.Closing:
		cause = dblock.ErrClosed
	default:
		return nil
	}
	if h.Held() {
		return a.errorf("%w", h.HeldError(a.name, cause))
	}
	return a.errorf("%w: %w", dblock.ErrNotAcquired, cause)
}

// notAcquired is TryAcquire's answer when the name is held or has a queue.
func (a *attempt) notAcquired(s store.QueueState) error {
	if s.Ahead > 0 && !s.Holder.Held() {
		return a.errorf("%w: %d waiters queued", dblock.ErrNotAcquired, s.Ahead)
	}
	return a.errorf("%w", s.Holder.HeldError(a.name, nil))
}

// free reports whether h can be taken by owner: free, expired, or owner's own.
func free(h store.Holder, owner string) bool {
	return !h.Held() || h.Owner == owner
}

// direct takes the name without queueing when nobody queues and it is free,
// or when the owner already holds it (reentry). It returns (nil, nil) when
// the caller must queue. The queue and the lock are checked and the lock
// taken by one statement (store.AcquireParams.QueueGuard), so a waiter
// whose row committed before it began is never jumped.
func (a *attempt) direct(wait bool) (*dblock.Lease, error) {
	l := a.l
	backoff := l.cfg.PollMin
	p := a.params
	p.QueueGuard = true
	p.QueueQuiet = l.quiet(a.name)
	for try := 1; ; try++ {
		// The take runs on a context that outlives the caller's: a
		// statement cancelled in flight may still commit, and a lease
		// nobody knows about would hold the name until it expires.
		reqStart := time.Now()
		tctx, cancel := l.db.StatementContext(context.WithoutCancel(a.ctx), l.cfg.ReleaseTimeout)
		unlock, err := a.lockWrites(wait)
		if err != nil {
			cancel()
			return nil, err
		}
		res, err := l.db.AcquireLease(tctx, nil, p)
		unlock()
		cancel()
		l.stats.statements.Add(uint64(max(res.Statements, 1)))
		if err == nil && res.Acquired {
			return a.started(res, reqStart)
		}
		if err == nil {
			l.contended.Mark(a.name)
			if !wait {
				return nil, a.notAcquired(store.QueueState{Ahead: res.Waiters, Holder: res.Holder})
			}
			return nil, nil
		}
		if serr := a.stopped(store.Holder{}); serr != nil {
			return nil, serr
		}
		if !wait || !a.retryable(err) {
			return nil, a.errorf("%w", err)
		}
		l.logger.LogAttrs(a.ctx, slog.LevelWarn, "fairqueue: acquire failed, retrying", a.attrs(
			slog.Int("attempt", try), slog.String("error", err.Error()))...)
		if serr := a.sleep(jitter(backoff)); serr != nil {
			return nil, serr
		}
		backoff = min(backoff*2, l.cfg.HeadPollMax)
	}
}

// sleep waits d, or until the wait ends.
func (a *attempt) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-a.ctx.Done():
	case <-a.l.life.Closing:
	}
	return a.stopped(store.Holder{})
}

// started hands an acquired lease to the keeper, with the owner's
// acquisition count as the row reports it (as optimistic does), so handles
// of one owner in several Lockers or processes agree on Reentry.
func (a *attempt) started(res store.AcquireResult, reqStart time.Time) (*dblock.Lease, error) {
	l := a.l
	token := res.Token
	lease, err := l.keeper.Start(leasekeeper.Params{
		Name: a.name, Owner: a.o.Owner, Mode: dblock.ModeFair, Token: token, TTL: a.o.TTL, MaxHold: a.o.MaxHold, MinHold: a.o.MinHold,
		ReqStart: reqStart, Reentry: res.Reentry, OnReleased: l.onReleased, Rows: l.rows,
	})
	if err != nil {
		l.local.notify(a.name, eventRelease)
		return nil, a.errorf("%w: %w", dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	l.stats.acquired.Add(1)
	waited := time.Since(a.start)
	if l.logger.Enabled(a.ctx, slog.LevelDebug) { // Attributes are built only when wanted.
		l.logger.LogAttrs(a.ctx, slog.LevelDebug, "fairqueue: acquired", a.attrs(slog.Int64("token", int64(token)))...)
	}
	l.events.Acquired(a.name, a.o.Owner, token, waited)
	return lease, nil
}

// jitter spreads a pause over [d/2, d] (backoff.Jitter).
var jitter = backoff.Jitter
