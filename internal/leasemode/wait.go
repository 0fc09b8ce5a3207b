package leasemode

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/wake"
)

// Pause is the wait between two tries of a mode without a per-name line
// (rwlock's readers, semaphores): it wakes on the name's notifications
// (PostgreSQL), at the time the caller says the answer may change (a
// holder's expiry by the database clock), or on a capped, jittered
// backoff, whichever comes first.
type Pause struct {
	ctx         context.Context // The call's wait, bounded by WithWait.
	life        *Life
	hub         *wake.Hub // Nil: no notifications; subscribed on the first Sleep.
	name        string
	step, max   time.Duration
	wakeCh      <-chan struct{}
	unsubscribe func()
	unmarked    bool // Subscribe without marking the name's row (Unmarked).
}

// Unmarked makes the pauses subscribe without marking the name's row as
// listened for (wake.Hub.SubscribeUnmarked): for a semaphore's waits, whose
// releases are announced anyway and whose name has no row to mark.
func (p *Pause) Unmarked() { p.unmarked = true }

// NewPause starts the pauses of one call on name (with name's
// notifications when hub is not nil); Close ends them. Nothing is
// subscribed until the first Sleep: a call that never waits (a try, or a
// first ask that is granted) never starts the Locker's listening
// connection, so releases are not announced to it for nothing.
func NewPause(ctx context.Context, life *Life, hub *wake.Hub, name string, pollMin, pollMax time.Duration) *Pause {
	return &Pause{ctx: ctx, life: life, hub: hub, name: name, step: pollMin, max: pollMax, unsubscribe: func() {}}
}

// Close stops the notifications.
func (p *Pause) Close() { p.unsubscribe() }

// Sleep waits for the next try: at the latest at change (by the database
// clock now; zero: none). It returns the cause of a wait that ended
// meanwhile: the context's, or dblock.ErrClosed.
//
// The first Sleep of a call with notifications subscribes to them and
// returns at once: a release announced before the subscription would be
// missed, so the caller asks again before it waits.
func (p *Pause) Sleep(change, now time.Time) error {
	if p.hub != nil {
		if p.unmarked {
			p.wakeCh, p.unsubscribe = p.hub.SubscribeUnmarked(p.name)
		} else {
			p.wakeCh, p.unsubscribe = p.hub.Subscribe(p.ctx, p.name)
		}
		p.hub = nil
		return context.Cause(p.ctx)
	}
	d := backoff.UntilExpiry(backoff.Jitter(p.step), change, now)
	p.step = min(p.step*2, p.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-p.wakeCh:
		return nil
	case <-p.ctx.Done():
		return context.Cause(p.ctx)
	case <-p.life.Closing:
		return dblock.ErrClosed
	}
}

// BeginPolled starts one call of a mode that waits by pausing between
// tries (rwlock's readers, semaphores): the prologue (mode.BeginOne, what
// naming the call in errors), the refusal of dblock.WithMinHold (why says
// why), entering the Locker's Life, and the pauses, bounded by
// dblock.WithWait. Call end when the call returns.
func (p Parts) BeginPolled(ctx context.Context, what, name string, wait bool, opts []dblock.Option,
	pollMin, pollMax time.Duration, why string) (c mode.Call, pause *Pause, end func(), err error) {
	if c, err = mode.BeginOne(ctx, what, name, wait, opts); err != nil {
		return c, nil, nil, err
	}
	if c.Opts.MinHold != 0 {
		return c, nil, nil, fmt.Errorf("%s %q: %w: WithMinHold: %s", what, name, dblock.ErrInvalidOption, why)
	}
	if !p.Life.Enter() {
		return c, nil, nil, fmt.Errorf("%s %q: %w: %w", what, name, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	waitCtx, cancel := c.WaitContext(ctx)
	pause = NewPause(waitCtx, p.Life, p.Hub, name, pollMin, pollMax)
	return c, pause, func() {
		pause.Close()
		cancel()
		p.Life.Leave()
	}, nil
}
