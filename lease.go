package dblock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/hook"
)

// Lease is a held lock, whatever the mode. It is safe for concurrent use.
//
// Done is closed when the lease ends: when it is lost (expired, taken over,
// released by an administrator, its connection died, its Locker closed) or
// released. Err is nil while the lease is held, a *LostError (matching ErrLost
// and the reason) after a loss, and ErrReleased after a normal Release.
type Lease struct {
	name     string
	owner    string
	mode     string
	token    Token
	reentry  int
	acquired time.Time

	release func(ctx context.Context) error
	done    chan struct{}

	mu       sync.Mutex
	err      error     // nil while held
	lost     error     // the *LostError, if lost before Release
	deadline time.Time // local monotonic time until which the lease can be trusted
	released bool      // Release has been called
	watches  []*lossWatch
}

func init() {
	hook.NewLease = func(p hook.LeaseParams) (any, hook.LeaseControl) {
		l := newLease(p)
		return l, leaseControl{l}
	}
}

// newLease returns a held lease. Lock modes reach it through internal/mode.
func newLease(p hook.LeaseParams) *Lease {
	return &Lease{
		name: p.Name, owner: p.Owner, mode: p.Mode, token: Token(p.Token), reentry: p.Reentry,
		acquired: time.Now(), release: p.Release, done: make(chan struct{}), deadline: p.Deadline,
	}
}

// leaseControl is held by the mode that created a lease: it reports losses
// and moves the local deadline after renewals. Users never see it.
type leaseControl struct{ l *Lease }

// Name returns the lock name.
func (l *Lease) Name() string { return l.name }

// Owner returns the owner that holds the lock.
func (l *Lease) Owner() string { return l.owner }

// Mode returns the mode that holds the lock (ModeOptimistic, ModePessimistic, ModeFair).
func (l *Lease) Mode() string { return l.mode }

// Token returns the fencing token (zero for a pessimistic lock that did not ask for one).
func (l *Lease) Token() Token { return l.token }

// Reentry returns how many acquisitions by this owner the lock counted when this
// one succeeded (1 for a first acquisition).
//
// On PostgreSQL and SQLite the count is the database's, so it includes
// acquisitions of the same owner made in other processes; so it is for a
// fair lock on MariaDB, whose acquisitions are procedure calls that read
// the row. Otherwise on MySQL and MariaDB the acquiring statement reports
// the count only when it inserts the row, and the count is this process's
// live handles on the hold (including this one), which is lower than the
// database's when the owner also holds the name from another process. The
// database's count is what decides when the row is freed, whatever Reentry
// says.
func (l *Lease) Reentry() int { return l.reentry }

// Done returns a channel closed when the lease ends (lost or released).
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held, a *LostError after a loss, and
// ErrReleased after Release.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Deadline returns the local time until which the lease can be trusted without
// hearing from the database, and false when the hold has no lease (a
// pessimistic transaction). Past it, assume the lock is gone.
func (l *Lease) Deadline() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, !l.deadline.IsZero()
}

// Release ends the hold. It returns an error wrapping ErrReleased when called
// again (and the loss too, if the lock was lost), and a *LostError
// (errors.Is(err, ErrLost)) when the lock had already been lost; the database is still asked to free the row when it can tell
// the row is ours. Cleanup contexts: pass context.WithoutCancel(ctx) when the
// caller's context may already be done.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		lost := l.lost
		l.mu.Unlock()
		if lost != nil {
			return fmt.Errorf("release %q: %w: %w", l.name, ErrReleased, lost)
		}
		return fmt.Errorf("release %q: %w", l.name, ErrReleased)
	}
	l.released = true
	lost := l.lost
	l.mu.Unlock()

	var err error
	if l.release != nil {
		err = l.release(ctx)
	}

	l.mu.Lock()
	if l.lost != nil {
		lost = l.lost // lost while releasing: the release found the row gone
	}
	if l.err == nil {
		l.endLocked(ErrReleased)
	}
	l.mu.Unlock()
	if lost != nil {
		if err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrLost) {
			return errjoin.Join(lost, err)
		}
		return lost
	}
	if err != nil {
		return fmt.Errorf("release %q: %w", l.name, err)
	}
	return nil
}

// Context returns a context derived from parent that is cancelled, with the
// loss as its cause, when the lease is lost. Call cancel when done with it.
//
// The context is registered with the lease (see lossWatch) rather than
// watched by a goroutine: a goroutine per call costs its start and, when
// the context ends, a wake-up, on every Do.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	w := &lossWatch{cancel: cancel}
	l.mu.Lock()
	ended := l.err
	if ended == nil {
		l.watches = append(l.watches, w)
	}
	l.mu.Unlock()
	if ended != nil && !errors.Is(ended, ErrReleased) {
		cancel(ended)
	}
	return ctx, w.stop(l)
}

// lossWatch is one context of Context: it is cancelled with the loss when
// the lease is lost, and forgotten when the lease is released or the
// context's cancel is called.
type lossWatch struct{ cancel context.CancelCauseFunc }

// stop returns the cancel function Context hands out: it forgets w and
// cancels its context.
func (w *lossWatch) stop(l *Lease) context.CancelFunc {
	return func() {
		l.mu.Lock()
		if i := slices.Index(l.watches, w); i >= 0 {
			l.watches = slices.Delete(l.watches, i, i+1)
		}
		l.mu.Unlock()
		w.cancel(context.Canceled)
	}
}

// endLocked ends the lease with err (a loss, or ErrReleased) and closes
// done; l.mu is held. It returns the contexts of Context, which it
// forgets: a loss cancels them once l.mu is released, a release leaves
// them be.
func (l *Lease) endLocked(err error) []*lossWatch {
	l.err = err
	close(l.done)
	watches := l.watches
	l.watches = nil
	return watches
}

// cancelWatches cancels the contexts endLocked returned, with err.
func cancelWatches(watches []*lossWatch, err error) {
	for _, w := range watches {
		w.cancel(err)
	}
}

// Lose marks the lease lost with reason (ErrExpired, ErrTakenOver, ...). It
// reports whether this call ended the lease; losses after Release or after an
// earlier loss are ignored.
func (c leaseControl) Lose(reason error) bool {
	l := c.l
	l.mu.Lock()
	if l.err != nil || l.lost != nil {
		l.mu.Unlock()
		return false
	}
	lostErr := &LostError{Name: l.name, Reason: reason}
	l.lost = lostErr
	if l.released {
		// Release is under way: it will close done and report the loss.
		l.mu.Unlock()
		return true
	}
	watches := l.endLocked(lostErr)
	l.mu.Unlock()
	cancelWatches(watches, lostErr)
	return true
}

// LoseIfHeld marks the lease lost with reason only while it is held and its
// Release has not begun (Lose, by contrast, also marks a lease whose Release
// is under way). It reports whether this call ended the lease. A Locker's
// Close uses it to end the leases still held before it frees their rows.
func (c leaseControl) LoseIfHeld(reason error) bool {
	l := c.l
	l.mu.Lock()
	if l.err != nil || l.lost != nil || l.released {
		l.mu.Unlock()
		return false
	}
	lostErr := &LostError{Name: l.name, Reason: reason}
	l.lost = lostErr
	watches := l.endLocked(lostErr)
	l.mu.Unlock()
	cancelWatches(watches, lostErr)
	return true
}

// SetDeadline moves the local trust deadline after a successful renewal.
func (c leaseControl) SetDeadline(t time.Time) {
	c.l.mu.Lock()
	c.l.deadline = t
	c.l.mu.Unlock()
}

// Releasing reports whether Release has been called.
func (c leaseControl) Releasing() bool {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.released
}
