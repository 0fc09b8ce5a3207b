package semaphore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

func (l *Locker) acquire(ctx context.Context, name string, limit, permits int, wait bool, opts []dblock.Option) (*dblock.Lease, error) {
	if err := validate(name, limit, permits); err != nil {
		return nil, fmt.Errorf("semaphore: acquire: %w", err)
	}
	if l.gate != nil {
		return l.gate.Acquire(ctx, "semaphore: acquire", name, store.WaitSemaphore, wait, opts,
			func(ctx context.Context, wait bool, start time.Time) (*dblock.Lease, error) {
				return l.grantNow(ctx, name, limit, permits, wait, start, opts)
			})
	}
	return l.grantNow(ctx, name, limit, permits, wait, time.Now(), opts)
}

// grantNow is the semaphore's own acquisition (behind the fair queue with
// Config.Fair) of a call that began at start.
func (l *Locker) grantNow(ctx context.Context, name string, limit, permits int, wait bool, start time.Time, opts []dblock.Option) (*dblock.Lease, error) {
	c, pause, end, err := l.parts.BeginPolled(ctx, "semaphore: acquire", name, wait, opts, l.cfg.PollMin, l.cfg.PollMax,
		"a grant is released when its holder is done")
	if err != nil {
		return nil, err
	}
	defer end()
	pause.Unmarked()
	g := &grantCall{l: l, ctx: ctx, o: c.Opts, wait: c.Wait, start: start, pause: pause,
		p: store.PermitParams{Name: name, Owner: c.Opts.Owner, Limit: limit, Permits: permits, TTL: c.Opts.FirstTTL(), Metadata: c.Opts.Metadata}}
	return g.run()
}

// grantCall is one Acquire or TryAcquire: ask, and between asks pause (a
// release's notification, the earliest grant's expiry, the backoff).
type grantCall struct {
	l     *Locker
	ctx   context.Context
	p     store.PermitParams
	o     mode.Options
	wait  bool
	start time.Time
	pause *leasemode.Pause

	res     store.PermitResult
	lastErr error
	// unknown is the error of an attempt whose answer was lost (it may
	// have made a grant), until a read of its request settles it: p.Request
	// stays that attempt's until then, and no attempt is sent before.
	unknown error
	// unknownStart is when that attempt was sent.
	unknownStart time.Time
}

func (g *grantCall) run() (*dblock.Lease, error) {
	for attempt := 1; ; attempt++ {
		lease, err := g.ask(attempt)
		if lease != nil || err != nil {
			return lease, err
		}
		if err := g.pause.Sleep(g.res.NextExpiry, g.res.Now); err != nil {
			return nil, g.ended(err)
		}
	}
}

// ask runs one grant transaction: the lease, an error that ends the call,
// or neither (pause and ask again). An attempt whose answer was lost is
// settled (settleUnknown) before the next is sent.
func (g *grantCall) ask(attempt int) (*dblock.Lease, error) {
	l := g.l
	if g.unknown != nil {
		return g.settleUnknown()
	}
	reqStart := time.Now()
	g.p.Request = store.NewRequest()
	stmtCtx, cancel := l.db.StatementContext(context.WithoutCancel(g.ctx), l.cfg.StatementTimeout)
	res, err := l.db.AcquirePermits(stmtCtx, g.p)
	cancel()
	switch {
	case err != nil && leasekeeper.OutcomeUnknown(err):
		g.unknown, g.unknownStart = err, reqStart
		return g.settleUnknown()
	case err != nil:
		if !g.wait || !leasekeeper.WaitRetryable(g.ctx, err) {
			return nil, fmt.Errorf("semaphore: acquire %q: %w", g.p.Name, err)
		}
		l.parts.Logger.LogAttrs(g.ctx, slog.LevelWarn, "semaphore: acquire failed, retrying",
			slog.String("lock_key", g.p.Name), slog.Int("attempt", attempt), slog.String("error", err.Error()))
		g.res, g.lastErr = store.PermitResult{}, err
		return nil, nil
	case res.Acquired:
		return g.newLease(res.Token, reqStart)
	}
	g.res, g.lastErr = res, nil
	if !g.wait {
		return nil, fmt.Errorf("semaphore: acquire %q: %w", g.p.Name, g.held(nil))
	}
	return nil, nil
}

// settleUnknown reads back the attempt whose answer was lost (unknown):
// the lease of its grant if it made one; if it made none, the call goes on
// as after a failed attempt (a waiting call pauses and asks again after a
// transient failure); if the grant cannot be read, a call that does not
// wait fails saying the outcome is unknown, and one that waits pauses and
// reads again before it asks.
func (g *grantCall) settleUnknown() (*dblock.Lease, error) {
	h, rerr := g.readBack()
	err := g.unknown
	switch {
	case rerr != nil:
		err = fmt.Errorf("outcome unknown, %d permits may be out to owner %q until the grant expires: %w", g.p.Permits, g.o.Owner, err)
		if !g.wait {
			return nil, fmt.Errorf("semaphore: acquire %q: %w", g.p.Name, err)
		}
	case h.Exists && h.ExpiresAt.After(h.Now):
		g.unknown = nil
		// After Close, newLease has released the grant it was handed.
		return g.newLease(dblock.Token(h.Version), g.unknownStart)
	default:
		g.unknown = nil
		if !g.wait || !leasekeeper.WaitRetryable(g.ctx, err) {
			return nil, fmt.Errorf("semaphore: acquire %q: %w", g.p.Name, err)
		}
	}
	g.res, g.lastErr = store.PermitResult{}, err
	return nil, nil
}

// readBack reads the grant of the attempt whose answer was lost
// (leasekeeper.ReadBack, bounded by StatementTimeout).
func (g *grantCall) readBack() (store.Holder, error) {
	var h store.Holder
	read := func(ctx context.Context) (err error) {
		h, err = g.l.db.GrantOf(ctx, g.p.Name, g.p.Request)
		return err
	}
	err := leasekeeper.ReadBack(g.ctx, g.l.cfg.StatementTimeout, g.l.cfg.PollMin, g.l.cfg.PollMax, read)
	return h, err
}

// held is the refusal, with cause.
func (g *grantCall) held(cause error) error {
	out := fmt.Errorf("%d of %d permits out, %d asked", g.res.Used, g.p.Limit, g.p.Permits)
	if cause != nil {
		out = fmt.Errorf("%w: %w", out, cause)
	}
	return &dblock.HeldError{Name: g.p.Name, Mode: dblock.ModeSemaphore, Cause: out}
}

// ended is the error of a wait that ended (cause).
func (g *grantCall) ended(cause error) error {
	if g.lastErr != nil {
		return fmt.Errorf("semaphore: acquire %q: the last attempt failed: %w (wait ended: %w)", g.p.Name, g.lastErr, cause)
	}
	return fmt.Errorf("semaphore: acquire %q: %w", g.p.Name, g.held(cause))
}

func (g *grantCall) newLease(token dblock.Token, reqStart time.Time) (*dblock.Lease, error) {
	l := g.l
	lease, err := l.parts.Keeper.Start(leasekeeper.Params{
		Name: g.p.Name, Owner: g.o.Owner, Mode: dblock.ModeSemaphore, Token: token, TTL: g.o.TTL, MaxHold: g.o.MaxHold,
		ReqStart: reqStart, Reentry: 1, Rows: grants{l.db},
	})
	if err != nil {
		return nil, fmt.Errorf("semaphore: acquire %q: %w: %w", g.p.Name, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	if l.parts.Logger.Enabled(g.ctx, slog.LevelDebug) { // Attributes are built only when wanted.
		l.parts.Logger.LogAttrs(g.ctx, slog.LevelDebug, "semaphore: permits granted", slog.String("lock_key", g.p.Name),
			slog.String("owner", g.o.Owner), slog.Int("permits", g.p.Permits), slog.Int64("token", int64(token)))
	}
	l.parts.Events.Acquired(g.p.Name, g.o.Owner, token, time.Since(g.start))
	return lease, nil
}

// grants are the Rows of grants (leasekeeper): a grant is its id.
type grants struct{ db *store.DB }

func (s grants) Renew(ctx context.Context, _, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return s.db.RenewPermits(ctx, token, owner, ttl)
}

func (s grants) Release(ctx context.Context, _, owner string, token dblock.Token) (bool, error) {
	return s.db.ReleasePermits(ctx, token, owner)
}

func (s grants) Holder(ctx context.Context, _, _ string, token dblock.Token) (store.Holder, error) {
	return s.db.PermitsHolder(ctx, token)
}
