package dblocktest

import (
	"errors"
	"time"

	"github.com/dblock-go/dblock"
)

// Holder is a name's holder as the lock row would show it.
type Holder struct {
	Name    string
	Owner   string
	Token   dblock.Token
	Mode    string
	Reentry int
	// AcquiredAt and ExpiresAt are by the Locker's Clock.
	AcquiredAt, ExpiresAt time.Time
}

// Holders lists who holds what.
func (l *Locker) Holders() []Holder {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Holder, 0, len(l.names))
	for name, r := range l.names {
		out = append(out, r.holder(name))
	}
	return out
}

// holder returns name's holder, if any.
func (l *Locker) holder(name string) (Holder, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.names[name]
	if !ok {
		return Holder{}, false
	}
	return r.holder(name), true
}

func (r *record) holder(name string) Holder {
	return Holder{Name: name, Owner: r.owner, Token: r.token, Mode: r.mode, Reentry: len(r.handles),
		AcquiredAt: r.acquired, ExpiresAt: r.expires}
}

// current returns name's record, or nil.
func (l *Locker) current(name string) *record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.names[name]
}

// Expire makes name's lease run out now: its holder's leases end lost with
// dblock.ErrExpired and the name is free. It reports whether name was held.
func (l *Locker) Expire(name string) bool { return l.endNow(name, dblock.ErrExpired) }

// ForceRelease frees name as an administrator would: its holder's leases
// end lost with dblock.ErrForceReleased. It reports whether name was held.
func (l *Locker) ForceRelease(name string) bool { return l.endNow(name, dblock.ErrForceReleased) }

// DropConnection ends name's hold as a lost connection ends a transaction:
// its holder's leases end lost with dblock.ErrConnLost and the name is
// free. It reports whether name was held.
func (l *Locker) DropConnection(name string) bool { return l.endNow(name, dblock.ErrConnLost) }

func (l *Locker) endNow(name string, reason error) bool {
	r := l.current(name)
	if r == nil {
		return false
	}
	l.end(name, r, reason)
	return true
}

// TakeOver gives name to owner with a new token, as another process would
// take it after the lease ran out: the old holder's leases end lost with
// dblock.ErrTakenOver. The new hold is not this Locker's to release (it has
// no lease); it ends with Expire, ForceRelease or the clock. It returns the
// new token.
func (l *Locker) TakeOver(name, owner string) dblock.Token {
	if r := l.current(name); r != nil {
		l.end(name, r, dblock.ErrTakenOver)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	l.tokens[name]++
	l.names[name] = &record{owner: owner, token: l.tokens[name], mode: dblock.ModeOptimistic,
		ttl: dblock.TTLDefault, acquired: now, expires: now.Add(dblock.TTLDefault), started: time.Now()}
	return l.tokens[name]
}

// StopRenewing makes every renewal of name's lease fail from now on, as a
// holder cut off from its database: the lease then runs out when the Clock
// passes its expiry (Holder.ExpiresAt), lost with dblock.ErrExpired. It
// reports whether name was held.
func (l *Locker) StopRenewing(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.names[name]
	if ok {
		r.renewing = false
	}
	return ok
}

// FailAcquires makes the next len(errs) acquisitions (Acquire, TryAcquire,
// Do) fail with errs in order, before looking at the name; a nil error
// stands for dblock.ErrUnavailable, and an error that wraps no dblock
// sentinel is wrapped with ErrUnavailable.
func (l *Locker) FailAcquires(errs ...error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range errs {
		switch {
		case err == nil:
			err = dblock.ErrUnavailable
		case !wrapsSentinel(err):
			err = errors.Join(dblock.ErrUnavailable, err)
		}
		l.failing = append(l.failing, err)
	}
}

func wrapsSentinel(err error) bool {
	for _, s := range []error{dblock.ErrUnavailable, dblock.ErrNotAcquired, dblock.ErrClosed,
		dblock.ErrInvalidOption, dblock.ErrSchemaMissing, dblock.ErrDeadlock, dblock.ErrSerialization} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
