package dblocktest

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/mode"
)

// record is a name's hold: what the lock row would say, and the handles
// given out for it (one per acquisition, re-entries included).
type record struct {
	owner    string
	token    dblock.Token
	mode     string
	ttl      time.Duration
	acquired time.Time // by the Clock
	expires  time.Time // by the Clock; moved by renewals
	capAt    time.Time // acquired + max hold; zero without a cap
	renewing bool      // false after StopRenewing: the lease runs out at expires
	started  time.Time // local time of the first acquisition, for hooks
	handles  []handle
}

type handle struct {
	lease *dblock.Lease
	ctl   mode.Control
}

// try takes name for o's owner if it can, or returns the channel that
// closes when the name may have freed.
func (l *Locker) try(name string, o mode.Options, start time.Time) (*dblock.Lease, <-chan struct{}, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, fmt.Errorf("dblocktest: acquire %q: %w: %w", name, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	if len(l.failing) > 0 {
		err := l.failing[0]
		l.failing = l.failing[1:]
		l.mu.Unlock()
		return nil, nil, fmt.Errorf("dblocktest: acquire %q: %w", name, err)
	}
	r := l.names[name]
	if r != nil && r.owner != o.Owner {
		ch := l.changedLocked(name)
		l.mu.Unlock()
		return nil, ch, nil
	}
	now := l.clock.Now()
	if r == nil {
		l.tokens[name]++
		r = &record{owner: o.Owner, token: l.tokens[name], mode: dblock.ModeOptimistic, ttl: o.TTL,
			acquired: now, expires: now.Add(o.FirstTTL()), renewing: true, started: time.Now()}
		if o.MaxHold > 0 {
			r.capAt = now.Add(o.MaxHold)
		}
		l.names[name] = r
	}
	h := handle{}
	h.lease, h.ctl = mode.NewLease(mode.LeaseParams{
		Name: name, Owner: o.Owner, Mode: r.mode, Token: int64(r.token), Reentry: len(r.handles) + 1,
		Deadline: time.Now().Add(o.FirstTTL()),
		Release:  func(ctx context.Context) error { return l.release(name, r, h.lease) },
	})
	r.handles = append(r.handles, h)
	l.mu.Unlock()
	l.events.Acquired(name, o.Owner, r.token, time.Since(start))
	return h.lease, nil, nil
}

// release ends one handle of r; the last one frees the name.
func (l *Locker) release(name string, r *record, lease *dblock.Lease) error {
	l.mu.Lock()
	if l.names[name] != r {
		l.mu.Unlock()
		return fmt.Errorf("dblocktest: release %q: %w", name, dblock.ErrNotHeld)
	}
	for i, h := range r.handles {
		if h.lease == lease {
			r.handles = append(r.handles[:i], r.handles[i+1:]...)
			break
		}
	}
	last := len(r.handles) == 0
	if last {
		l.freeLocked(name)
	}
	l.mu.Unlock()
	if last {
		l.events.Released(name, r.owner, r.token, time.Since(r.started))
	}
	return nil
}

// end frees name, if r still holds it, and ends every handle of r as lost
// with reason.
func (l *Locker) end(name string, r *record, reason error) {
	l.mu.Lock()
	if l.names[name] != r {
		l.mu.Unlock()
		return
	}
	l.freeLocked(name)
	handles := r.handles
	r.handles = nil
	l.mu.Unlock()
	for _, h := range handles {
		if h.ctl.Lose(reason) {
			l.events.Lost(name, r.owner, r.token, h.lease.Err(), time.Since(r.started))
		}
	}
}

// freeLocked empties name and wakes its waiters; l.mu is held.
func (l *Locker) freeLocked(name string) {
	delete(l.names, name)
	if ch, ok := l.changed[name]; ok {
		close(ch)
		delete(l.changed, name)
	}
}

// changedLocked is the channel closed when name may have freed; l.mu is held.
func (l *Locker) changedLocked(name string) chan struct{} {
	ch, ok := l.changed[name]
	if !ok {
		ch = make(chan struct{})
		l.changed[name] = ch
	}
	return ch
}

// tick acts at the clock's new time: a live holder's lease is renewed
// (never past its cap); a lease whose renewals stopped, or whose cap came,
// runs out.
func (l *Locker) tick(now time.Time) {
	type ending struct {
		name string
		r    *record
	}
	var out []ending
	l.mu.Lock()
	for name, r := range l.names {
		if r.renewing {
			r.expires = now.Add(r.ttl)
		}
		if !r.capAt.IsZero() && r.expires.After(r.capAt) {
			r.expires = r.capAt
		}
		if !now.Before(r.expires) {
			out = append(out, ending{name, r})
		}
	}
	l.mu.Unlock()
	for _, e := range out {
		l.end(e.name, e.r, dblock.ErrExpired)
	}
}
