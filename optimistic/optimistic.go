package optimistic

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/wake"
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

// ErrClosed is returned (wrapped, together with dblock.ErrNotAcquired) by
// acquisitions on a Locker that was closed.
var ErrClosed = errors.New("optimistic: locker closed")

// Config configures a Locker. The zero value (or a nil *Config) means defaults.
type Config struct {
	// Logger receives state changes at Debug and renewal retries and lost
	// leases at Warn. Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observe acquisitions, releases and losses. Defaults to none.
	Hooks *dblock.Hooks
	// PollMin is a waiter's first backoff step; the step doubles up to
	// PollMax and is jittered. Defaults to PollMinDefault.
	PollMin time.Duration
	// PollMax caps a waiter's backoff. Defaults to PollMaxDefault.
	PollMax time.Duration
	// ReleaseTimeout bounds the release run by Do after fn returns and by
	// Close for every lease still held. Defaults to ReleaseTimeoutDefault.
	ReleaseTimeout time.Duration
	// StatementTimeout bounds each acquire statement. The statement is not
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
	db      *dialect.DB
	cfg     Config
	logger  *slog.Logger
	hooks   dblock.Hooks
	hub     *wake.Hub // nil when notifications are off or unsupported.
	closing chan struct{}

	mu     sync.Mutex
	held   map[*dblock.Lease]*held
	closed bool
	wg     sync.WaitGroup // watchdogs
}

var _ dblock.Locker = (*Locker)(nil)

// New returns a Locker on db. db stays the caller's: Close does not close it.
// Configuration errors wrap dblock.ErrInvalidOption.
func New(db *dialect.DB, cfg *Config) (*Locker, error) {
	if db == nil || db.DB == nil || db.Dialect == nil {
		return nil, fmt.Errorf("optimistic: new: %w: nil database", dblock.ErrInvalidOption)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.PollMin < 0 || c.PollMax < 0 || c.ReleaseTimeout < 0 || c.StatementTimeout < 0 {
		return nil, fmt.Errorf("optimistic: new: %w: negative duration (poll min %v, poll max %v, release timeout %v, statement timeout %v)",
			dblock.ErrInvalidOption, c.PollMin, c.PollMax, c.ReleaseTimeout, c.StatementTimeout)
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = StatementTimeoutDefault
	}
	if c.PollMin == 0 {
		c.PollMin = PollMinDefault
	}
	if c.PollMax == 0 {
		c.PollMax = max(PollMaxDefault, c.PollMin)
	}
	if c.PollMax < c.PollMin {
		return nil, fmt.Errorf("optimistic: new: %w: poll max %v is below poll min %v", dblock.ErrInvalidOption, c.PollMax, c.PollMin)
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = ReleaseTimeoutDefault
	}
	l := &Locker{
		db: db, cfg: c, logger: dblock.LoggerOrDefault(c.Logger), closing: make(chan struct{}),
		held: map[*dblock.Lease]*held{},
	}
	if c.Hooks != nil {
		l.hooks = *c.Hooks
	}
	if !c.DisableNotify && db.Dialect.Caps().Notify {
		l.hub = wake.New(db, l.logger)
	}
	return l, nil
}

// Acquire takes name, waiting while another owner holds it: on PostgreSQL a
// release wakes it at once, and everywhere it re-checks at the holder's
// expiry and on a capped, jittered backoff. The wait ends with ctx or
// dblock.WithWait; the error then wraps dblock.ErrNotAcquired (through a
// *dblock.HeldError naming the holder) and context.Cause(ctx).
func (l *Locker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return l.acquire(ctx, name, true, opts)
}

// TryAcquire takes name if it is free, expired or already this owner's, and
// otherwise returns at once an error wrapping dblock.ErrNotAcquired with a
// *dblock.HeldError naming the holder. It never waits for a row lock: a name
// held by a pessimistic transaction is reported as held.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	return l.acquire(ctx, name, false, opts)
}

// Do acquires name (waiting like Acquire), runs fn with a context cancelled
// with the *dblock.LostError as cause if the lease is lost, and then releases,
// bounded by Config.ReleaseTimeout even when ctx is done. It returns fn's
// error, joined with the loss when the lease was lost while fn ran.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	lease, err := l.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return dblock.Run(ctx, lease, l.cfg.ReleaseTimeout, fn)
}

// Close releases every lease still held through l (bounded by
// Config.ReleaseTimeout), ends waits in progress with ErrClosed, stops the
// watchdogs and the wake-up connection, and returns when they have stopped.
// Calling it again does nothing.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closing)
	leases := make([]*dblock.Lease, 0, len(l.held))
	for lease := range l.held {
		leases = append(leases, lease)
	}
	l.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ReleaseTimeout)
	defer cancel()
	var errs []error
	for _, lease := range leases {
		err := lease.Release(ctx)
		if err != nil && !errors.Is(err, dblock.ErrReleased) && !errors.Is(err, dblock.ErrLost) {
			errs = append(errs, err)
		}
	}
	l.wg.Wait()
	if l.hub != nil {
		errs = append(errs, l.hub.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("optimistic: close: %w", err)
	}
	return nil
}

func (l *Locker) acquire(ctx context.Context, name string, wait bool, opts []dblock.Option) (*dblock.Lease, error) {
	if err := dblock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("optimistic: acquire: %w", err)
	}
	o, err := dblock.ResolveOptions(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("optimistic: acquire %q: %w", name, err)
	}
	if o.HasWait && o.Wait == 0 {
		wait = false
	}
	if l.isClosed() {
		return nil, fmt.Errorf("optimistic: acquire %q: %w: %w", name, dblock.ErrNotAcquired, ErrClosed)
	}
	waitCtx := ctx
	if wait && o.HasWait {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, o.Wait)
		defer cancel()
	}

	start := time.Now()
	backoff := l.cfg.PollMin
	var wakeCh <-chan struct{}
	params := dialect.AcquireParams{Name: name, Owner: o.Owner, Mode: dblock.ModeOptimistic, TTL: o.TTL, Metadata: o.Metadata}
	polled := false // The last wake-up came from a timer, not a notification.
	var res dialect.AcquireResult
	for attempt := 1; ; attempt++ {
		if waitCtx.Err() != nil {
			return nil, fmt.Errorf("optimistic: acquire %q: %w: %w", name, dblock.ErrNotAcquired, context.Cause(waitCtx))
		}
		if polled {
			// A timer wake-up reads first: a read takes no write lock, so
			// pollers never compete with the holder's release (SQLite has
			// one writer) and cost one round trip while the name stays held.
			h, err := l.db.LeaseHolder(waitCtx, nil, name)
			if err == nil && h.Held() && h.Owner != o.Owner {
				res = dialect.AcquireResult{Holder: h}
				goto wait
			}
		}
		{
			reqStart := time.Now()
			stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.StatementTimeout)
			var err error
			res, err = l.db.AcquireLease(stmtCtx, nil, params)
			cancel()
			if err != nil {
				if waitCtx.Err() != nil {
					return nil, fmt.Errorf("optimistic: acquire %q: %w: %w", name, dblock.ErrNotAcquired, context.Cause(waitCtx))
				}
				if !wait || !transient(err) {
					return nil, fmt.Errorf("optimistic: acquire %q: %w", name, err)
				}
				l.logger.LogAttrs(ctx, slog.LevelWarn, "optimistic: acquire failed, retrying",
					slog.String("lock_key", name), slog.String("owner", o.Owner), slog.Int("attempt", attempt), slog.String("error", err.Error()))
				res = dialect.AcquireResult{}
			} else if res.Acquired {
				return l.newLease(name, o, res, reqStart, time.Since(start))
			}
			if !wait {
				return nil, fmt.Errorf("optimistic: acquire %q: %w", name, res.Holder.HeldError(name, nil))
			}
			if wakeCh == nil && l.hub != nil {
				// Subscribe, then try again at once: a release announced between
				// the failed attempt and the subscription would be missed.
				var unsubscribe func()
				wakeCh, unsubscribe = l.hub.Subscribe(name)
				defer unsubscribe()
				continue
			}
		}
	wait:
		held := res.Holder.HeldError(name, nil)
		d := jitter(backoff)
		backoff = min(backoff*2, l.cfg.PollMax)
		if h := res.Holder; !h.ExpiresAt.IsZero() && !h.Now.IsZero() {
			// Wake when the lease ends by the database clock, whatever the backoff says.
			if rem := h.ExpiresAt.Sub(h.Now) + time.Millisecond; rem < d {
				d = max(rem, 0)
			}
		}
		timer := time.NewTimer(d)
		polled = false
		select {
		case <-timer.C:
			polled = true
		case <-wakeCh:
			timer.Stop()
		case <-waitCtx.Done():
			timer.Stop()
			held.Cause = context.Cause(waitCtx)
			return nil, fmt.Errorf("optimistic: acquire %q: %w", name, held)
		case <-l.closing:
			timer.Stop()
			held.Cause = ErrClosed
			return nil, fmt.Errorf("optimistic: acquire %q: %w", name, held)
		}
	}
}

// transient reports whether an acquire error is worth retrying while waiting.
func transient(err error) bool {
	return errors.Is(err, dblock.ErrUnavailable) || dialect.IsRetryable(err) || errors.Is(err, driver.ErrBadConn)
}

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *Locker) newLease(name string, o dblock.Options, res dialect.AcquireResult, reqStart time.Time, waited time.Duration) (*dblock.Lease, error) {
	token := res.Token
	ctx, cancel := context.WithCancel(context.Background())
	h := &held{
		l: l, name: name, owner: o.Owner, token: token, ttl: o.TTL, renew: o.Renew,
		ctx: ctx, stop: cancel, watchDone: make(chan struct{}), deadline: reqStart.Add(o.TTL), acquired: time.Now(),
	}
	h.lease, h.ctl = dblock.NewLease(dblock.LeaseParams{
		Name: name, Owner: o.Owner, Mode: dblock.ModeOptimistic, Token: token, Reentry: res.Reentry,
		Deadline: h.deadline, Release: h.release,
	})
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		cancel()
		close(h.watchDone)
		relCtx, relCancel := context.WithTimeout(context.Background(), l.cfg.ReleaseTimeout)
		defer relCancel()
		_, _ = l.db.ReleaseLease(relCtx, nil, name, o.Owner, token)
		return nil, fmt.Errorf("optimistic: acquire %q: %w: %w", name, dblock.ErrNotAcquired, ErrClosed)
	}
	l.held[h.lease] = h
	l.wg.Add(1)
	l.mu.Unlock()
	go h.watch()

	l.logger.LogAttrs(ctx, slog.LevelDebug, "optimistic: acquired",
		slog.String("lock_key", name), slog.String("owner", o.Owner), slog.Int64("token", int64(token)))
	if f := l.hooks.OnAcquired; f != nil {
		f(name, o.Owner, token, waited)
	}
	return h.lease, nil
}

func (l *Locker) forget(lease *dblock.Lease) {
	l.mu.Lock()
	delete(l.held, lease)
	l.mu.Unlock()
}

func (l *Locker) lookup(lease *dblock.Lease) *held {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[lease]
}

// held is the state of one lease: its watchdog and its release.
type held struct {
	l         *Locker
	lease     *dblock.Lease
	ctl       dblock.LeaseControl
	name      string
	owner     string
	token     dblock.Token
	ttl       time.Duration
	renew     bool
	acquired  time.Time
	ctx       context.Context // Cancelled when Release begins; belongs to the lease, not to any caller.
	stop      context.CancelFunc
	watchDone chan struct{}

	mu       sync.Mutex
	deadline time.Time // Local monotonic time until which the lease can be trusted.
}

func (h *held) currentDeadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// watch renews the lease every TTL/3 when asked to, and declares it expired
// when the local deadline passes without a successful renewal. A failed
// renewal statement is retried until the deadline; only a renewal that finds
// the row no longer ours, or the deadline, ends the lease.
func (h *held) watch() {
	defer h.l.wg.Done()
	defer close(h.watchDone)
	deadline := h.currentDeadline()
	expiry := time.NewTimer(time.Until(deadline))
	defer expiry.Stop()
	interval := h.ttl / 3
	var renewC <-chan time.Time
	var renewTimer *time.Timer
	if h.renew {
		renewTimer = time.NewTimer(interval)
		defer renewTimer.Stop()
		renewC = renewTimer.C
	}
	retry := min(max(interval/4, h.l.cfg.PollMin), 2*time.Second)
	for attempt := 1; ; attempt++ {
		select {
		case <-h.ctx.Done():
			return
		case <-expiry.C:
			if h.ctx.Err() == nil {
				h.lose(dblock.ErrExpired)
			}
			return
		case <-renewC:
		}
		reqStart := time.Now()
		ctx, cancel := context.WithDeadline(h.ctx, deadline)
		ok, err := h.l.db.RenewLease(ctx, nil, h.name, h.owner, h.token, h.ttl)
		cancel()
		if h.ctx.Err() != nil {
			return // Release began; it owns the row from here.
		}
		if err != nil {
			h.l.logger.LogAttrs(h.ctx, slog.LevelWarn, "optimistic: renewal failed, retrying until the lease deadline",
				slog.String("lock_key", h.name), slog.String("owner", h.owner), slog.Int64("token", int64(h.token)),
				slog.Int("attempt", attempt), slog.String("error", err.Error()))
			renewTimer.Reset(jitter(retry))
			continue
		}
		if !ok {
			h.lose(h.classify(h.ctx))
			return
		}
		attempt = 0
		deadline = reqStart.Add(h.ttl)
		h.mu.Lock()
		h.deadline = deadline
		h.mu.Unlock()
		h.ctl.SetDeadline(deadline)
		expiry.Reset(time.Until(deadline))
		renewTimer.Reset(interval)
	}
}

// lose ends the lease with reason, once, and reports it.
func (h *held) lose(reason error) {
	if !h.ctl.Lose(reason) {
		return
	}
	if !h.ctl.Releasing() {
		h.l.forget(h.lease)
	}
	h.l.logger.LogAttrs(context.Background(), slog.LevelWarn, "optimistic: lease lost",
		slog.String("lock_key", h.name), slog.String("owner", h.owner), slog.Int64("token", int64(h.token)),
		slog.String("error", reason.Error()))
	if f := h.l.hooks.OnLost; f != nil {
		f(h.name, h.owner, h.token, &dblock.LostError{Name: h.name, Reason: reason})
	}
}

// classify reads the row to say why a CAS on (name, owner, token) found
// nothing: the lease ran out, another owner or a newer token holds the row,
// or an administrator freed it.
func (h *held) classify(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.l.cfg.ReleaseTimeout)
	defer cancel()
	expiredLocally := !time.Now().Before(h.currentDeadline())
	row, err := h.l.db.LeaseHolder(ctx, nil, h.name)
	switch {
	case err != nil:
		if expiredLocally {
			return fmt.Errorf("%w (row unreadable: %w)", dblock.ErrExpired, err)
		}
		return fmt.Errorf("%w (row unreadable: %w)", dblock.ErrTakenOver, err)
	case row.Owner == h.owner && row.Version == int64(h.token):
		return dblock.ErrExpired
	case !row.Exists || row.Owner == "" && row.Mode != dblock.ModePessimistic:
		// The database never ends a lease before the local deadline, so a
		// row freed earlier was freed by an administrator.
		if expiredLocally {
			return dblock.ErrExpired
		}
		return dblock.ErrForceReleased
	default:
		return dblock.ErrTakenOver
	}
}

// release is the Lease's release: it stops renewal first, then runs the CAS.
func (h *held) release(ctx context.Context) error {
	h.stop()
	<-h.watchDone
	defer h.l.forget(h.lease)
	// A transient failure (a busy SQLite file, a dropped connection) is
	// retried while ctx allows and the lease can still be ours: otherwise
	// the name would stay held until its lease expires.
	backoff := h.l.cfg.PollMin
	uncertain := false // An earlier attempt may have been applied.
	for attempt := 1; ; attempt++ {
		ok, err := h.l.db.ReleaseLease(ctx, nil, h.name, h.owner, h.token)
		if err == nil && ok {
			break
		}
		if err == nil {
			if uncertain {
				break // The earlier attempt most likely freed the row.
			}
			h.lose(h.classify(ctx))
			return nil // The Lease reports the loss.
		}
		if !transient(err) || ctx.Err() != nil || !time.Now().Before(h.currentDeadline()) {
			return err
		}
		uncertain = true
		h.l.logger.LogAttrs(ctx, slog.LevelWarn, "optimistic: release failed, retrying",
			slog.String("lock_key", h.name), slog.String("owner", h.owner), slog.Int64("token", int64(h.token)),
			slog.Int("attempt", attempt), slog.String("error", err.Error()))
		t := time.NewTimer(jitter(backoff))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		backoff = min(backoff*2, h.l.cfg.PollMax)
	}
	h.l.logger.LogAttrs(ctx, slog.LevelDebug, "optimistic: released",
		slog.String("lock_key", h.name), slog.String("owner", h.owner), slog.Int64("token", int64(h.token)))
	if f := h.l.hooks.OnReleased; f != nil {
		f(h.name, h.owner, h.token, time.Since(h.acquired))
	}
	return nil
}

// jitter returns a duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}
