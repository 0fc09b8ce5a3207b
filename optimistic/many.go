package optimistic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

// AcquireMany takes every one of names, or none: their leases are taken in
// one transaction, in name order, so that callers asking for overlapping
// sets never hold part of a set while waiting for the rest, and never
// deadlock (no statement waits for a row lock). It waits like Acquire while
// any of the names is held by another owner, re-checking when that name is
// released or expires. Duplicate names count once. The leases come back in
// sorted name order, one per name, each with its own token, renewal and
// Release; the options (owner, TTL, renewal, metadata) apply to all. The
// error of a wait that ends names the holder that blocked it last.
func (l *Locker) AcquireMany(ctx context.Context, names []string, opts ...dblock.Option) ([]*dblock.Lease, error) {
	return l.acquireMany(ctx, names, true, opts)
}

// TryAcquireMany takes every one of names if none is held by another owner,
// and otherwise nothing, returning at once an error wrapping
// dblock.ErrNotAcquired with a *dblock.HeldError naming the first holder
// found (see AcquireMany).
func (l *Locker) TryAcquireMany(ctx context.Context, names []string, opts ...dblock.Option) ([]*dblock.Lease, error) {
	return l.acquireMany(ctx, names, false, opts)
}

func (l *Locker) acquireMany(ctx context.Context, names []string, wait bool, opts []dblock.Option) (leases []*dblock.Lease, err error) {
	ctx, call := l.rec.BeginAcquire(ctx, strings.Join(names, ","), wait)
	defer func() { call.EndToken(0, err) }()
	m, c, err := l.prepareMany(ctx, names, wait, opts)
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := c.WaitContext(ctx)
	defer cancel()
	m.waitCtx = waitCtx
	defer func() { m.unsubscribe() }()
	for attempt := 1; ; attempt++ {
		if waitCtx.Err() != nil {
			return nil, l.manyWaitEnded(m.label, m.held, context.Cause(waitCtx))
		}
		leases, h, err := m.ask(attempt)
		switch {
		case leases != nil:
			return leases, nil
		case errors.Is(err, errAskAgain):
			continue
		case err != nil:
			return nil, err
		}
		if err := m.sleep(h); err != nil {
			return nil, err
		}
	}
}

// errAskAgain: ask again at once (the set's blocker changed, and the
// wake-ups now follow it).
var errAskAgain = errors.New("ask again")

// manyCall is one AcquireMany's state.
type manyCall struct {
	l            *Locker
	ctx, waitCtx context.Context
	names        []string // Sorted, without duplicates.
	label        string
	o            mode.Options
	params       []store.AcquireParams
	wait         bool
	start        time.Time
	backoff      time.Duration

	held        *dblock.HeldError // The last holder that blocked the set.
	wakeCh      <-chan struct{}
	wakeName    string
	unsubscribe func()
}

// prepareMany validates the names and options of an AcquireMany.
func (l *Locker) prepareMany(ctx context.Context, names []string, wait bool, opts []dblock.Option) (*manyCall, mode.Call, error) {
	c, err := mode.Begin(ctx, "optimistic: acquire many", names, wait, opts)
	if err != nil {
		return nil, c, err
	}
	if l.isClosed() {
		return nil, c, fmt.Errorf("optimistic: acquire many %q: %w: %w", c.Label, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	o := c.Opts
	params := make([]store.AcquireParams, len(c.Names))
	for i, name := range c.Names {
		params[i] = store.AcquireParams{Name: name, Owner: o.Owner, Mode: l.mode, TTL: o.FirstTTL(), Metadata: o.Metadata}
	}
	return &manyCall{l: l, ctx: ctx, names: c.Names, label: c.Label, o: o, params: params, wait: c.Wait,
		start: time.Now(), backoff: l.cfg.PollMin, unsubscribe: func() {}}, c, nil
}

// ask runs the acquisition's transaction once: the leases, or the holder
// that blocked the set (with a nil error: sleep and ask again), or an
// error that ends the call (errAskAgain: ask again at once).
func (m *manyCall) ask(attempt int) ([]*dblock.Lease, store.Holder, error) {
	l := m.l
	reqStart := time.Now()
	handles := make([]map[dblock.Token]int, len(m.names))
	for i, name := range m.names {
		handles[i] = l.handles(name, m.o.Owner)
	}
	stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), l.cfg.StatementTimeout)
	results, blocked, err := l.db.AcquireLeases(stmtCtx, m.params)
	cancel()
	switch {
	case err == nil && blocked < 0:
		leases, err := l.newLeases(m.names, m.o, results, reqStart, time.Since(m.start))
		return leases, store.Holder{}, err
	case err == nil:
		h := results[blocked].Holder
		m.held = h.HeldError(m.names[blocked], nil)
		if !m.wait {
			return nil, h, fmt.Errorf("optimistic: acquire many %q: %w", m.label, m.held)
		}
		if l.hub != nil && m.wakeName != m.names[blocked] {
			// Follow the name that blocks the set now; subscribe, then try
			// again at once (a release in between would be missed).
			m.unsubscribe()
			m.wakeName = m.names[blocked]
			m.wakeCh, m.unsubscribe = l.hub.Subscribe(m.ctx, m.wakeName)
			return nil, h, errAskAgain
		}
		return nil, h, nil
	}
	if leasekeeper.OutcomeUnknown(err) {
		// The commit's answer may be lost: every name or none was taken.
		leases, settled := l.settleMany(m.ctx, m.names, m.o, handles, reqStart, m.start)
		if leases != nil {
			return leases, store.Holder{}, nil
		}
		if !settled {
			return nil, store.Holder{}, fmt.Errorf("optimistic: acquire many %q: outcome unknown, the names may be held by owner %q until their leases expire: %w",
				m.label, m.o.Owner, err)
		}
	}
	if !m.wait || !transient(err) || m.waitCtx.Err() != nil {
		return nil, store.Holder{}, fmt.Errorf("optimistic: acquire many %q: %w", m.label, err)
	}
	l.logger.LogAttrs(m.ctx, slog.LevelWarn, "optimistic: acquire many failed, retrying",
		slog.String("lock_keys", m.label), slog.String("owner", m.o.Owner), slog.Int("attempt", attempt), slog.String("error", err.Error()))
	return nil, store.Holder{}, nil
}

// sleep waits the backoff (at most until the blocking lease h expires), a
// wake-up of the blocking name, the end of the wait, or Close.
func (m *manyCall) sleep(h store.Holder) error {
	l := m.l
	d := jitter(m.backoff)
	m.backoff = min(m.backoff*2, l.cfg.PollMax)
	d = backoff.UntilExpiry(d, h.ExpiresAt, h.Now)
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-m.wakeCh:
	case <-m.waitCtx.Done():
		return l.manyWaitEnded(m.label, m.held, context.Cause(m.waitCtx))
	case <-l.life.Closing:
		return l.manyWaitEnded(m.label, m.held, dblock.ErrClosed)
	}
	return nil
}

// manyWaitEnded is the error of an AcquireMany whose wait ended.
func (l *Locker) manyWaitEnded(label string, held *dblock.HeldError, cause error) error {
	if held == nil {
		return fmt.Errorf("optimistic: acquire many %q: %w: %w", label, dblock.ErrNotAcquired, cause)
	}
	held.Cause = cause
	return fmt.Errorf("optimistic: acquire many %q: %w", label, held)
}

// settleMany reads the rows of an AcquireMany whose commit's answer was
// lost. The transaction took every name or none: if every row names the
// owner with one more entry than this Locker's handles, it returns the
// leases; if none does, the set was not taken (settled). Anything else, or
// rows that cannot be read, leaves it unsettled. The reads share one bound,
// StatementTimeout, each read tried as settle's (leasekeeper.ReadBack).
func (l *Locker) settleMany(ctx context.Context, names []string, o mode.Options, handles []map[dblock.Token]int, reqStart, start time.Time) ([]*dblock.Lease, bool) {
	deadline := time.Now().Add(l.cfg.StatementTimeout)
	results := make([]store.AcquireResult, len(names))
	taken := 0
	for i, name := range names {
		var h store.Holder
		read := func(ctx context.Context) (err error) {
			h, err = l.db.LeaseHolder(ctx, nil, name)
			return err
		}
		bound := time.Until(deadline)
		if bound <= 0 || leasekeeper.ReadBack(ctx, bound, l.cfg.PollMin, l.cfg.PollMax, read) != nil {
			return nil, false
		}
		token := dblock.Token(h.Version)
		if h.Held() && h.Owner == o.Owner && h.Reentry > handles[i][token] {
			results[i] = store.AcquireResult{Acquired: true, Token: token, Reentry: h.Reentry}
			taken++
		}
	}
	switch taken {
	case 0:
		return nil, true
	case len(names):
		leases, err := l.newLeases(names, o, results, reqStart, time.Since(start))
		return leases, err == nil
	default:
		return nil, false
	}
}

// newLeases hands the leases of a set just taken to the keeper. After Close
// it releases them all and fails.
func (l *Locker) newLeases(names []string, o mode.Options, results []store.AcquireResult, reqStart time.Time, waited time.Duration) ([]*dblock.Lease, error) {
	leases := make([]*dblock.Lease, 0, len(names))
	for i, name := range names {
		lease, err := l.newLease(name, o, results[i], reqStart, waited)
		if err != nil {
			// Closed meanwhile: newLease released this one; release the rest.
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.ReleaseTimeout)
			for _, taken := range leases {
				_ = taken.Release(ctx)
			}
			for j := i + 1; j < len(names); j++ {
				_, _ = l.db.ReleaseLease(ctx, nil, names[j], o.Owner, results[j].Token)
			}
			cancel()
			return nil, err
		}
		leases = append(leases, lease)
	}
	return leases, nil
}
