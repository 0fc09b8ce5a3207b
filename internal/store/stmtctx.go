package store

import (
	"context"
	"sync/atomic"
	"time"
)

// StatementContext bounds one statement on db by d. When parent can be
// cancelled, it is context.WithTimeout(parent, d). When parent can never
// be (its Done is nil: the engines pass context.WithoutCancel(...) for
// statements their caller may not cut short, and a release called with
// context.Background() is the same), the statement's end comes from a
// deadline shared by the statements that begin within a tenth of d of each
// other (stmtWindow), so each is bounded by between nine tenths of d and d
// and no timer is made per statement: a timer's start and stop cost about
// 25 µs of CPU per statement on the lease paths, where a pair of
// statements takes 500. Such a context keeps parent's values and says that
// its deadline is its only end (DeadlineOnly), so that a native path
// (PostgreSQL's pgx) sets the deadline on the connection instead of having
// pgx watch the context: pgx watches a cancellable context with
// context.AfterFunc, six allocations and a goroutine hand-off per
// statement. Its cancel function does nothing.
func (db *DB) StatementContext(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if parent.Done() != nil || d <= 0 {
		return context.WithTimeout(parent, d)
	}
	return &deadlineOnly{Context: parent, w: db.windows.of(d)}, func() {}
}

// deadlineOnly is a context whose only end is its window's deadline; its
// values are those of the embedded context, which is never cancelled.
type deadlineOnly struct {
	context.Context
	w *stmtWindow
}

func (c *deadlineOnly) Deadline() (time.Time, bool) { return c.w.deadline, true }
func (c *deadlineOnly) Done() <-chan struct{}       { return c.w.ctx.Done() }
func (c *deadlineOnly) Err() error                  { return c.w.ctx.Err() }

// AfterFunc arranges for f to run when the window ends, as
// context.AfterFunc does: a context derived from this one (database/sql
// derives one per query, pgx watches one per statement) registers with the
// window's context instead of starting a goroutine to watch it.
func (c *deadlineOnly) AfterFunc(f func()) func() bool { return context.AfterFunc(c.w.ctx, f) }

// AfterFunc is context.AfterFunc. For a context made by StatementContext
// whose only end is its deadline, f is registered with the window's
// context directly, where context.AfterFunc would go through
// deadlineOnly.AfterFunc and register a context of its own in between
// (three allocations fewer, on every pessimistic hold's end).
func AfterFunc(ctx context.Context, f func()) (stop func() bool) {
	if d, ok := ctx.(*deadlineOnly); ok {
		return context.AfterFunc(d.w.ctx, f)
	}
	return context.AfterFunc(ctx, f)
}

// DeadlineOnly reports, for a context made by StatementContext whose only
// end is its deadline, that deadline and the context without it: a caller
// that enforces the deadline by other means (a deadline on the connection)
// may run the statement under bare. ok is false for any other context.
func DeadlineOnly(ctx context.Context) (deadline time.Time, bare context.Context, ok bool) {
	d, ok := ctx.(*deadlineOnly)
	if !ok {
		return time.Time{}, nil, false
	}
	return d.w.deadline, d.Context, true
}

// stmtWindow is a deadline shared by the statements bounded by d that
// begin before a tenth of d has passed since it was made; ctx ends at it.
type stmtWindow struct {
	d        time.Duration
	deadline time.Time
	ctx      context.Context
	// cancel is never called: ctx's timer ends at the deadline.
	cancel context.CancelFunc
}

// stmtWindows holds a DB's current window per bound (the engines use two
// or three: the statement and release timeouts); a fifth bound replaces
// one of them.
type stmtWindows struct{ slots [4]atomic.Pointer[stmtWindow] }

// of returns a window for a statement bounded by d that begins now.
func (s *stmtWindows) of(d time.Duration) *stmtWindow {
	now := time.Now()
	slot := int(uint64(d) % uint64(len(s.slots)))
	for i := range s.slots {
		w := s.slots[i].Load()
		if w == nil {
			slot = i
			break
		}
		if w.d == d {
			if w.deadline.Sub(now) >= d-d/10 {
				return w
			}
			slot = i
			break
		}
	}
	w := &stmtWindow{d: d, deadline: now.Add(d)}
	w.ctx, w.cancel = context.WithDeadline(context.Background(), w.deadline)
	s.slots[slot].Store(w)
	return w
}
