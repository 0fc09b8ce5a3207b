package leasemode

import (
	"context"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
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
	step, max   time.Duration
	wakeCh      <-chan struct{}
	unsubscribe func()
}

// NewPause starts the pauses of one call on name (subscribing to its
// notifications when hub is not nil); Close ends them.
func NewPause(ctx context.Context, life *Life, hub *wake.Hub, name string, pollMin, pollMax time.Duration) *Pause {
	p := &Pause{ctx: ctx, life: life, step: pollMin, max: pollMax, unsubscribe: func() {}}
	if hub != nil {
		p.wakeCh, p.unsubscribe = hub.Subscribe(name)
	}
	return p
}

// Close stops the notifications.
func (p *Pause) Close() { p.unsubscribe() }

// Sleep waits for the next try: at the latest at change (by the database
// clock now; zero: none). It returns the cause of a wait that ended
// meanwhile: the context's, or dblock.ErrClosed.
func (p *Pause) Sleep(change, now time.Time) error {
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
