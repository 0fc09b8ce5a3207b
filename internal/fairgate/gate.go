package fairgate

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

// Heartbeats of a queued call's row.
const (
	// HeartbeatInterval is how often a queued call refreshes its row.
	HeartbeatInterval = 2 * time.Second
	// HeartbeatTimeout is how long a row stays live without a heartbeat:
	// a crashed waiter holds up the ones behind it at most this long.
	HeartbeatTimeout = 10 * time.Second
)

// Gate orders one Locker's fair acquisitions by arrival.
type Gate struct {
	// Prefix names the mode in errors and logs ("rwlock").
	Prefix string
	Parts  leasemode.Parts
	// PollMin and PollMax bound a waiter's backoff between two checks of
	// its place (PostgreSQL also wakes it when a waiter ahead leaves).
	PollMin, PollMax time.Duration
	// StatementTimeout bounds each statement, ReleaseTimeout the removal
	// of the call's row when it ends.
	StatementTimeout, ReleaseTimeout time.Duration
}

// Step is the mode's own acquisition of the call's name: wait false tries
// once, wait true waits within ctx. start is when the fair call began: its
// wait, as hooks and instruments see it, counts from there.
type Step func(ctx context.Context, wait bool, start time.Time) (*dblock.Lease, error)

// Acquire runs step in arrival order among fair callers of name. what
// names the call in errors ("rwlock: acquire read"); wait and opts are the
// caller's (WithWait bounds the whole call, the queue included).
func (g *Gate) Acquire(ctx context.Context, what, name string, kind store.WaitKind, wait bool, opts []dblock.Option, step Step) (*dblock.Lease, error) {
	start := time.Now()
	c, err := mode.BeginOne(ctx, what, name, wait, opts)
	if err != nil {
		return nil, err
	}
	if !g.Parts.Life.Enter() {
		return nil, fmt.Errorf("%s %q: %w: %w", what, name, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	defer g.Parts.Life.Leave()
	waitCtx, cancel := c.WaitContext(ctx)
	defer cancel()
	q := &queued{g: g, ctx: waitCtx, what: what, name: name, owner: c.Opts.Owner, kind: kind}
	st, err := q.peek()
	switch {
	case err != nil && !(c.Wait && leasekeeper.WaitRetryable(waitCtx, err)):
		return nil, err
	case err != nil:
		// Queue: joining and checking retry what failed.
	case st.OwnerHolds:
		return step(waitCtx, c.Wait, start)
	case st.Queued == 0:
		lease, err := step(waitCtx, false, start)
		if err == nil || !c.Wait || waitCtx.Err() != nil || !queueAfter(waitCtx, err) {
			return lease, err
		}
	case !c.Wait:
		return nil, fmt.Errorf("%s %q: %w: %s", what, name, dblock.ErrNotAcquired, queuedText(st.Queued))
	}
	defer q.leave()
	if err := q.turn(); err != nil {
		return nil, err
	}
	return step(waitCtx, true, start)
}

// queueAfter reports whether a waiting call whose first try failed with
// err queues: a refusal, or a failure the mode's waiting acquisition
// retries anyway.
func queueAfter(ctx context.Context, err error) bool {
	return errors.Is(err, dblock.ErrNotAcquired) || leasekeeper.WaitRetryable(ctx, err)
}

// queued is one fair call in the queue: its row, its heartbeat, and what
// its last check saw.
type queued struct {
	g     *Gate
	ctx   context.Context // The caller's, bounded by WithWait.
	what  string
	name  string
	owner string
	kind  store.WaitKind

	id        int64         // The row, 0 when none.
	stopBeats chan struct{} // Closed to stop the heartbeat.
	beatsDone chan struct{}
	ahead     int
	lastErr   error
}

// peek reads the queue in the newcomer's way.
func (q *queued) peek() (store.GateState, error) {
	ctx, cancel := context.WithTimeout(q.ctx, q.g.StatementTimeout)
	defer cancel()
	st, err := q.g.Parts.DB.PeekGate(ctx, q.name, q.kind, q.owner)
	if err != nil {
		return st, fmt.Errorf("%s %q: %w", q.what, q.name, err)
	}
	return st, nil
}

// turn joins the queue and waits until no live waiter ahead is in the
// call's way. A row found lapsed joins again at the back.
func (q *queued) turn() error {
	pause := leasemode.NewPause(q.ctx, q.g.Parts.Life, q.g.Parts.Hub, q.name, q.g.PollMin, q.g.PollMax)
	defer pause.Close()
	if q.kind == store.WaitSemaphore {
		pause.Unmarked()
	}
	for attempt := 1; ; attempt++ {
		if q.id == 0 {
			q.join()
		}
		if q.id != 0 {
			st, err := q.check()
			switch {
			case err == nil && st.Live && st.Queued == 0:
				return nil
			case err == nil && !st.Live:
				q.logRetry("the waiter's row lapsed, joining again", attempt, nil)
				q.leave()
				continue
			}
		}
		if err := pause.Sleep(time.Time{}, time.Time{}); err != nil {
			return q.ended(err)
		}
	}
}

// join inserts the call's row and starts its heartbeat; a failure is
// remembered and retried after a pause.
func (q *queued) join() {
	ctx, cancel := q.g.Parts.DB.StatementContext(context.WithoutCancel(q.ctx), q.g.StatementTimeout)
	defer cancel()
	t, err := q.g.Parts.DB.Enqueue(ctx, nil, q.name, q.owner, q.kind, HeartbeatTimeout)
	if err != nil {
		q.fail("enqueue", err)
		return
	}
	q.id, q.lastErr = t.ID, nil
	q.stopBeats, q.beatsDone = make(chan struct{}), make(chan struct{})
	go q.heartbeat(q.id, q.stopBeats, q.beatsDone)
}

// check reads the row's liveness and the waiters ahead in its way.
func (q *queued) check() (store.GateState, error) {
	ctx, cancel := q.g.Parts.DB.StatementContext(context.WithoutCancel(q.ctx), q.g.StatementTimeout)
	defer cancel()
	st, err := q.g.Parts.DB.CheckGate(ctx, q.id)
	if err != nil {
		q.fail("check", err)
		return st, err
	}
	q.ahead, q.lastErr = st.Queued, nil
	return st, nil
}

// fail remembers a failed statement for the call's error, and logs it.
func (q *queued) fail(what string, err error) {
	q.lastErr = err
	q.logRetry("fair queue: "+what+" failed, retrying", 0, err)
}

func (q *queued) logRetry(msg string, attempt int, err error) {
	attrs := []slog.Attr{slog.String("lock_key", q.name), slog.String("owner", q.owner)}
	if attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", attempt))
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	q.g.Parts.Logger.LogAttrs(q.ctx, slog.LevelWarn, q.g.Prefix+": "+msg, attrs...)
}

// ended is the error of a wait that ended in the queue (cause).
func (q *queued) ended(cause error) error {
	if q.lastErr != nil && !leasekeeper.Transient(q.lastErr) {
		return fmt.Errorf("%s %q: %w", q.what, q.name, q.lastErr)
	}
	if q.lastErr != nil {
		return fmt.Errorf("%s %q: %w: the last queue statement failed: %w (wait ended: %w)", q.what, q.name, dblock.ErrNotAcquired, q.lastErr, cause)
	}
	return fmt.Errorf("%s %q: %w: %w (%s ahead)", q.what, q.name, dblock.ErrNotAcquired, cause, queuedText(q.ahead))
}

// queuedText says how many fair waiters are queued.
func queuedText(n int) string {
	if n == 1 {
		return "1 fair waiter queued"
	}
	return fmt.Sprintf("%d fair waiters queued", n)
}

// heartbeat extends row id's deadline every HeartbeatInterval until stop.
func (q *queued) heartbeat(id int64, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.g.StatementTimeout)
		_, err := q.g.Parts.DB.HeartbeatWaiter(ctx, nil, id, HeartbeatTimeout)
		cancel()
		if err != nil {
			q.logRetry("fair queue: heartbeat failed", 0, err)
		}
	}
}

// leave stops the heartbeat and deletes the call's row (bounded by
// ReleaseTimeout, even when the call's context is done). A row that
// cannot be deleted lapses by itself within HeartbeatTimeout.
func (q *queued) leave() {
	if q.id == 0 {
		return
	}
	close(q.stopBeats)
	<-q.beatsDone
	ctx, cancel := q.g.Parts.DB.StatementContext(context.WithoutCancel(q.ctx), q.g.ReleaseTimeout)
	defer cancel()
	if _, err := q.g.Parts.DB.LeaveQueue(ctx, nil, q.id); err != nil {
		q.logRetry("fair queue: leaving failed; the row lapses by itself", 0, err)
	}
	q.id = 0
}
