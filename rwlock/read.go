package rwlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

// AcquireRead takes the read lock of name, shared with other readers,
// waiting while a writer (or an exclusive holder of any mode) holds it or
// waits for it. The lease's token is the current readers' token: the
// token of the hold that readers began (or of the owner's own exclusive
// hold, for a downgrade), which a later writer's exceeds. The owner of an
// exclusive hold of name may take the read lock too (a downgrade): its
// last exclusive release then leaves the name to readers, and no waiting
// writer can slip in between. Re-entry by owner counts, as in the other
// modes. The wait ends with ctx or dblock.WithWait, with an error wrapping
// dblock.ErrNotAcquired and the cause.
func (l *Locker) AcquireRead(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	ctx, call := l.parts.Events.Recorder().BeginAcquire(ctx, name, true)
	lease, err := l.acquireRead(ctx, name, true, opts)
	call.End(lease, err)
	return lease, err
}

// TryAcquireRead takes the read lock of name if it can at once, and
// otherwise returns an error wrapping dblock.ErrNotAcquired with a
// *dblock.HeldError naming the holder (readers, refused because a writer
// waits, show as held by readers). A free name that another owner's
// waiting writer (or optimistic waiter) reserved is refused too (the
// error's cause says so; see package optimistic).
func (l *Locker) TryAcquireRead(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	ctx, call := l.parts.Events.Recorder().BeginAcquire(ctx, name, false)
	lease, err := l.acquireRead(ctx, name, false, opts)
	call.End(lease, err)
	return lease, err
}

func (l *Locker) acquireRead(ctx context.Context, name string, wait bool, opts []dblock.Option) (*dblock.Lease, error) {
	if l.gate != nil {
		return l.gate.Acquire(ctx, "rwlock: acquire read", name, store.WaitRead, wait, opts,
			func(ctx context.Context, wait bool, start time.Time) (*dblock.Lease, error) {
				return l.readNow(ctx, name, wait, start, opts)
			})
	}
	return l.readNow(ctx, name, wait, time.Now(), opts)
}

// readNow is the read side's own acquisition (behind the fair queue with
// Config.Fair) of a call that began at start.
func (l *Locker) readNow(ctx context.Context, name string, wait bool, start time.Time, opts []dblock.Option) (*dblock.Lease, error) {
	c, pause, end, err := l.parts.BeginPolled(ctx, "rwlock: acquire read", name, wait, opts, l.cfg.PollMin, l.cfg.PollMax,
		"a read lease is released when its holder is done")
	if err != nil {
		return nil, err
	}
	defer end()
	r := &readCall{l: l, ctx: ctx, name: name, o: c.Opts, wait: c.Wait, start: start, pause: pause}
	return r.run()
}

// readCall is one AcquireRead or TryAcquireRead: ask, and between asks
// pause (a notification, the holder's expiry, the backoff).
type readCall struct {
	l     *Locker
	ctx   context.Context
	name  string
	o     mode.Options
	wait  bool
	start time.Time
	pause *leasemode.Pause

	res     store.ShareResult
	lastErr error // The last attempt's error, nil once one answers.
	// unknown is the error of an acquire whose answer was lost (it may
	// have taken a share), until a read of the row settles it: no acquire
	// is sent again before, or the owner would re-enter the share it may
	// hold and the extra entry would outlive its lease.
	unknown error
	// unknownStart is when that acquire was sent.
	unknownStart time.Time
}

func (r *readCall) run() (*dblock.Lease, error) {
	for attempt := 1; ; attempt++ {
		lease, err := r.ask(attempt)
		if lease != nil || err != nil {
			return lease, err
		}
		h, change := r.res.Holder, r.res.Holder.ExpiresAt
		if errors.Is(h.Reason, store.ErrReserved) {
			change = h.Next.Until // A free name kept for a writer of another Locker.
		}
		if err := r.pause.Sleep(change, h.Now); err != nil {
			return nil, r.ended(err)
		}
	}
}

// ask runs one acquire transaction: the lease, an error that ends the
// call, or neither (pause and ask again).
func (r *readCall) ask(attempt int) (*dblock.Lease, error) {
	l := r.l
	if r.unknown != nil {
		return r.settleUnknown()
	}
	reqStart := time.Now()
	stmtCtx, cancel := l.db.StatementContext(context.WithoutCancel(r.ctx), l.cfg.StatementTimeout)
	res, err := l.db.AcquireShare(stmtCtx, store.ShareParams{Name: r.name, Owner: r.o.Owner, TTL: r.o.FirstTTL(), Metadata: r.o.Metadata})
	cancel()
	switch {
	case err != nil && leasekeeper.OutcomeUnknown(err):
		r.unknown, r.unknownStart = err, reqStart
		return r.settleUnknown()
	case err != nil:
		if !r.wait || !leasekeeper.WaitRetryable(r.ctx, err) {
			return nil, fmt.Errorf("rwlock: acquire read %q: %w", r.name, err)
		}
		l.parts.Logger.LogAttrs(r.ctx, slog.LevelWarn, "rwlock: acquire read failed, retrying",
			slog.String("lock_key", r.name), slog.Int("attempt", attempt), slog.String("error", err.Error()))
		r.res, r.lastErr = store.ShareResult{}, err
		return nil, nil
	case res.Acquired:
		return r.newLease(res.Token, res.Granted, shares{db: l.db, joined: res.Joined, recorded: res.Recorded}, reqStart)
	}
	r.res, r.lastErr = res, nil
	if !r.wait {
		return nil, fmt.Errorf("rwlock: acquire read %q: %w", r.name, r.held(nil))
	}
	return nil, nil
}

// held is the refusal naming the holder, with cause.
func (r *readCall) held(cause error) error {
	if r.res.WriterWaits && cause == nil {
		cause = errors.New("a writer waits for the name")
	}
	return r.res.Holder.HeldError(r.name, cause)
}

// ended is the error of a wait that ended (cause).
func (r *readCall) ended(cause error) error {
	if r.lastErr != nil {
		return fmt.Errorf("rwlock: acquire read %q: the last attempt failed: %w (wait ended: %w)", r.name, r.lastErr, cause)
	}
	return fmt.Errorf("rwlock: acquire read %q: %w", r.name, r.held(cause))
}

// settleUnknown reads back the acquire whose answer was lost (unknown):
// its lease if it took a share; if it did not, the call goes on as after
// a failed attempt (a waiting call pauses and asks again after a transient
// failure); if the row cannot be read, a call that does not wait fails
// saying the outcome is unknown, and one that waits pauses and reads again
// before it asks.
func (r *readCall) settleUnknown() (*dblock.Lease, error) {
	lease, settled := r.settle(r.unknownStart)
	err := r.unknown
	switch {
	case lease != nil:
		r.unknown = nil
		return lease, nil
	case !settled:
		err = fmt.Errorf("outcome unknown, the name may be read-held by owner %q until its lease expires: %w", r.o.Owner, err)
		if !r.wait {
			return nil, fmt.Errorf("rwlock: acquire read %q: %w", r.name, err)
		}
	default:
		r.unknown = nil
		if !r.wait || !leasekeeper.WaitRetryable(r.ctx, err) {
			return nil, fmt.Errorf("rwlock: acquire read %q: %w", r.name, err)
		}
	}
	r.res, r.lastErr = store.ShareResult{}, err
	return nil, nil
}

// settle reads back an acquire whose answer was lost
// (leasekeeper.ReadBack, bounded by StatementTimeout): a share of the
// owner with more entries than this Locker's leases on it was taken by
// it, and settle returns its lease. settled: the row was read.
func (r *readCall) settle(reqStart time.Time) (lease *dblock.Lease, settled bool) {
	var h store.Holder
	read := func(ctx context.Context) (err error) {
		h, err = r.l.db.ShareHolder(ctx, r.name, r.o.Owner)
		return err
	}
	if err := leasekeeper.ReadBack(r.ctx, r.l.cfg.StatementTimeout, r.l.cfg.PollMin, r.l.cfg.PollMax, read); err != nil {
		return nil, false
	}
	if h.Owner != r.o.Owner || !h.ExpiresAt.After(h.Now) {
		return nil, true
	}
	token := dblock.Token(h.Version)
	if h.Reentry <= r.l.parts.Keeper.Handles(r.name, r.o.Owner, token) {
		return nil, true
	}
	// After Close, newLease has released the share it was handed: settled.
	lease, err := r.newLease(token, 0, shares{db: r.l.db}, reqStart)
	if err != nil {
		return nil, true
	}
	return lease, true
}

func (r *readCall) newLease(token dblock.Token, granted time.Duration, rows shares, reqStart time.Time) (*dblock.Lease, error) {
	l := r.l
	lease, err := l.parts.Keeper.Start(leasekeeper.Params{
		Name: r.name, Owner: r.o.Owner, Mode: dblock.ModeRead, Token: token, TTL: r.o.TTL, MaxHold: r.o.MaxHold,
		ReqStart: reqStart, Granted: granted, Rows: rows,
	})
	if err != nil {
		return nil, fmt.Errorf("rwlock: acquire read %q: %w: %w", r.name, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	if l.parts.Logger.Enabled(r.ctx, slog.LevelDebug) { // Attributes are built only when wanted.
		l.parts.Logger.LogAttrs(r.ctx, slog.LevelDebug, "rwlock: read acquired",
			slog.String("lock_key", r.name), slog.String("owner", r.o.Owner), slog.Int64("token", int64(token)))
	}
	l.parts.Events.Acquired(r.name, r.o.Owner, token, time.Since(r.start))
	return lease, nil
}

// shares are the Rows of a read lease (leasekeeper); joined: its share
// joined a running period (store.ShareResult.Joined); recorded: its reader
// was recorded in the name's row by a plain take (store.ShareResult.Recorded).
type shares struct {
	db       *store.DB
	joined   bool
	recorded bool
}

func (s shares) Renew(ctx context.Context, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	return s.db.RenewShare(ctx, name, owner, token, ttl)
}

func (s shares) Release(ctx context.Context, name, owner string, token dblock.Token) (bool, error) {
	switch {
	case s.joined:
		return s.db.ReleaseJoinedShare(ctx, name, owner, token)
	case s.recorded:
		return s.db.ReleaseRecordedShare(ctx, name, owner, token)
	}
	return s.db.ReleaseShare(ctx, name, owner, token)
}

func (s shares) Holder(ctx context.Context, name, owner string, _ dblock.Token) (store.Holder, error) {
	return s.db.ShareHolder(ctx, name, owner)
}
