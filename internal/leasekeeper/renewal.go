package leasekeeper

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
)

// renewal is the state of one lease's watchdog loop (held.renewLoop).
type renewal struct {
	h *held
	// deadline is the lease's local deadline; expiry fires at it.
	deadline time.Time
	expiry   *time.Timer
	// timer fires when the next renewal is due; due is its channel, nil
	// once the hold's cap is reached (the lease then runs out at its
	// deadline).
	timer *time.Timer
	due   <-chan time.Time
	// interval is the time between renewals (TTL/3), retry the time
	// between attempts after a failure.
	interval, retry time.Duration
	// attempt counts the attempts since the last success, quick the
	// renewals retried at once since then.
	attempt, quick int
}

// renewLoop runs until Release begins (it returns nil) or the lease is lost
// (it returns the reason).
func (h *held) renewLoop() error {
	r := h.newRenewal()
	defer r.stop()
	for {
		if done, reason := r.wait(); done {
			return reason
		}
		r.attempt++
		reqStart := time.Now()
		ttl, renew := h.renewTTL(reqStart)
		if !renew {
			r.due = nil // The cap is reached: the lease runs out at its deadline.
			continue
		}
		ok, err := r.renew(reqStart, ttl)
		switch {
		case h.ctx.Err() != nil:
			return nil // Release began, or the lease was lost elsewhere; the row is not the watchdog's any more.
		case err != nil:
			r.failed(err)
		case !ok:
			return h.classify(h.ctx)
		default:
			r.renewed(reqStart.Add(ttl))
		}
	}
}

// newRenewal arms the loop's timers: the expiry at the current deadline,
// the first renewal a third of the TTL after the acquisition (armWatch).
func (h *held) newRenewal() *renewal {
	r := &renewal{h: h, deadline: h.currentDeadline(), interval: h.p.TTL / 3}
	r.expiry = time.NewTimer(time.Until(r.deadline))
	r.timer = time.NewTimer(max(0, time.Until(h.acquired.Add(r.interval))))
	r.due = r.timer.C
	r.retry = min(max(r.interval/4, h.k.cfg.RetryMin), 2*time.Second)
	return r
}

// stop stops the loop's timers.
func (r *renewal) stop() {
	r.expiry.Stop()
	r.timer.Stop()
}

// wait blocks until a renewal is due (done false) or the loop ends: on
// Release or a loss found elsewhere (reason nil), or at the deadline
// (dblock.ErrExpired).
func (r *renewal) wait() (done bool, reason error) {
	select {
	case <-r.h.ctx.Done():
		return true, nil
	case <-r.expiry.C:
		if r.h.ctx.Err() != nil {
			return true, nil
		}
		return true, dblock.ErrExpired
	case <-r.due:
		return false, nil
	}
}

// renew sends one renewal asking for ttl. It may use two thirds of the
// time left: a connection that hangs (a server that stalls a new session)
// is given up while there is still time to renew on another.
func (r *renewal) renew(reqStart time.Time, ttl time.Duration) (bool, error) {
	h := r.h
	ctx, cancel := context.WithDeadline(h.ctx, reqStart.Add(time.Until(r.deadline)*2/3))
	defer cancel()
	h.k.count()
	unlock := h.k.lockWrites()
	defer unlock()
	return h.k.rows(h.p).Renew(ctx, h.p.Name, h.p.Owner, h.p.Token, ttl)
}

// failed reports a failed renewal and schedules the next attempt: at once
// (jittered) after a broken connection, up to quickRetries times, else
// after the retry interval.
func (r *renewal) failed(err error) {
	h := r.h
	h.k.cfg.Events.RenewalFailed()
	h.k.logger.LogAttrs(h.ctx, slog.LevelWarn, h.k.cfg.Prefix+": renewal failed, retrying until the lease deadline",
		h.attrs(slog.Int("attempt", r.attempt), slog.String("error", err.Error()))...)
	if errors.Is(err, dblock.ErrUnavailable) && r.quick < quickRetries {
		// A broken connection: the pool hands out the next one (or
		// opens one) at once, and a server that killed every session
		// of this process must not cost a whole retry interval each.
		r.quick++
		r.timer.Reset(jitter(h.k.cfg.RetryMin))
		return
	}
	r.timer.Reset(jitter(r.retry))
}

// renewed moves the lease's deadline after a successful renewal and
// schedules the next.
func (r *renewal) renewed(deadline time.Time) {
	h := r.h
	r.attempt, r.quick = 0, 0
	r.deadline = deadline
	h.mu.Lock()
	h.deadline = deadline
	h.mu.Unlock()
	h.ctl.SetDeadline(deadline)
	r.expiry.Reset(time.Until(deadline))
	r.timer.Reset(r.interval)
}

// renewTTL is the lease a renewal sent at reqStart asks for: the TTL, cut
// short so that it never ends past the hold's cap (ReqStart + MaxHold), and
// false when what is left of the cap is too short to renew at all.
func (h *held) renewTTL(reqStart time.Time) (time.Duration, bool) {
	if h.p.MaxHold <= 0 {
		return h.p.TTL, true
	}
	left := h.p.ReqStart.Add(h.p.MaxHold).Sub(reqStart)
	if left < dblock.TTLMin {
		return 0, false
	}
	return min(h.p.TTL, left), true
}

// quickRetries is how many renewals after a broken connection are retried
// at once, before the usual retry interval applies.
const quickRetries = 3
