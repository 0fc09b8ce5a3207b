package optimistic

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/dblock-go/dblock"
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

func (l *Locker) acquireMany(ctx context.Context, names []string, wait bool, opts []dblock.Option) ([]*dblock.Lease, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("optimistic: acquire many: %w: no names", dblock.ErrInvalidName)
	}
	for _, n := range names {
		if err := dblock.ValidateName(n); err != nil {
			return nil, fmt.Errorf("optimistic: acquire many: %w", err)
		}
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	label := strings.Join(sorted, ",")
	o, err := mode.Resolve(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("optimistic: acquire many %q: %w", label, err)
	}
	if o.HasWait && o.Wait == 0 {
		wait = false
	}
	if l.isClosed() {
		return nil, fmt.Errorf("optimistic: acquire many %q: %w: %w", label, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	waitCtx := ctx
	if wait && o.HasWait {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, o.Wait)
		defer cancel()
	}
	params := make([]store.AcquireParams, len(sorted))
	for i, name := range sorted {
		params[i] = store.AcquireParams{Name: name, Owner: o.Owner, Mode: dblock.ModeOptimistic, TTL: o.FirstTTL(), Metadata: o.Metadata}
	}

	start := time.Now()
	backoff := l.cfg.PollMin
	var held *dblock.HeldError // The last holder that blocked the set.
	var wakeCh <-chan struct{}
	wakeName := ""
	unsubscribe := func() {}
	defer func() { unsubscribe() }()
	for attempt := 1; ; attempt++ {
		if waitCtx.Err() != nil {
			return nil, l.manyWaitEnded(label, held, context.Cause(waitCtx))
		}
		reqStart := time.Now()
		handles := make([]map[dblock.Token]int, len(sorted))
		for i, name := range sorted {
			handles[i] = l.handles(name, o.Owner)
		}
		stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.StatementTimeout)
		results, blocked, err := l.db.AcquireLeases(stmtCtx, params)
		cancel()
		var h store.Holder
		switch {
		case err == nil && blocked < 0:
			return l.newLeases(sorted, o, results, reqStart, time.Since(start))
		case err == nil:
			h = results[blocked].Holder
			held = h.HeldError(sorted[blocked], nil)
			if !wait {
				return nil, fmt.Errorf("optimistic: acquire many %q: %w", label, held)
			}
			if l.hub != nil && wakeName != sorted[blocked] {
				// Follow the name that blocks the set now; subscribe, then
				// try again at once (a release in between would be missed).
				unsubscribe()
				wakeName = sorted[blocked]
				wakeCh, unsubscribe = l.hub.Subscribe(wakeName)
				continue
			}
		default:
			if outcomeUnknown(err) {
				// The commit's answer may be lost: every name or none was taken.
				leases, settled := l.settleMany(ctx, sorted, o, handles, reqStart, start)
				if leases != nil {
					return leases, nil
				}
				if !settled {
					return nil, fmt.Errorf("optimistic: acquire many %q: outcome unknown, the names may be held by owner %q until their leases expire: %w",
						label, o.Owner, err)
				}
			}
			if !wait || !transient(err) || waitCtx.Err() != nil {
				return nil, fmt.Errorf("optimistic: acquire many %q: %w", label, err)
			}
			l.logger.LogAttrs(ctx, slog.LevelWarn, "optimistic: acquire many failed, retrying",
				slog.String("lock_keys", label), slog.String("owner", o.Owner), slog.Int("attempt", attempt), slog.String("error", err.Error()))
		}
		d := jitter(backoff)
		backoff = min(backoff*2, l.cfg.PollMax)
		if !h.ExpiresAt.IsZero() && !h.Now.IsZero() {
			if rem := h.ExpiresAt.Sub(h.Now) + time.Millisecond; rem < d {
				d = max(rem, 0)
			}
		}
		timer := time.NewTimer(d)
		select {
		case <-timer.C:
		case <-wakeCh:
			timer.Stop()
		case <-waitCtx.Done():
			timer.Stop()
			return nil, l.manyWaitEnded(label, held, context.Cause(waitCtx))
		case <-l.closing:
			timer.Stop()
			return nil, l.manyWaitEnded(label, held, dblock.ErrClosed)
		}
	}
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
// rows that cannot be read, leaves it unsettled.
func (l *Locker) settleMany(ctx context.Context, names []string, o mode.Options, handles []map[dblock.Token]int, reqStart, start time.Time) ([]*dblock.Lease, bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.StatementTimeout)
	defer cancel()
	results := make([]store.AcquireResult, len(names))
	taken := 0
	for i, name := range names {
		h, err := l.db.LeaseHolder(rctx, nil, name)
		if err != nil {
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
