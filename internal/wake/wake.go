package wake

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/store"
)

// Reconnect backoff bounds of the listening connection.
const (
	reconnectMin = 100 * time.Millisecond
	reconnectMax = 30 * time.Second
)

// markFor is how long a mark of listening lasts unless renewed, by the
// database clock (see marks.go).
const markFor = 10 * time.Second

// Hub fans notifications out to the waiters of each name. It is safe for
// concurrent use.
type Hub struct {
	db     *store.DB
	logger *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	subs    map[string]map[*sub]struct{}
	marks   marks
	started bool
	closed  bool
}

// sub is one subscription; owner, when set, is the waiting owner: a
// release announced for another owner (a name kept for its waiter) does
// not wake it.
type sub struct {
	ch chan struct{}
	// sent counts the notices sent to ch, merged there or not (see
	// SubscribeCounted).
	sent  atomic.Uint64
	owner string
	// unmarked: subscribed by SubscribeUnmarked; its name's mark is not
	// renewed for it.
	unmarked bool
	// quiet, when set, is asked at each notice of the name whether the
	// subscriber would only go back to sleep on it: a notice is then
	// counted and sent nowhere (see SubscribeCounted).
	quiet func() bool
}

// New returns a hub for db. Nothing is started until the first Subscribe.
func New(db *store.DB, logger *slog.Logger) *Hub {
	if logger == nil {
		logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hub{db: db, logger: logger, ctx: ctx, cancel: cancel, subs: map[string]map[*sub]struct{}{},
		marks: marks{d: markFor, renewAt: map[string]time.Time{}}}
}

// Subscribe registers interest in name. wake receives a value (it is buffered
// one deep, and sends never block) whenever a release of name is announced,
// and also after the listening connection was re-established, since
// notifications may have been missed. cancel unregisters; call it when done.
//
// Where releases are announced, Subscribe first marks name's row as listened
// for (marks.go), in the caller's goroutine and bounded by ctx, unless this
// hub's mark is fresh: a release is announced only while its row is marked.
// The caller asks for the name again after Subscribe returns, as it must
// anyway (a release before the subscription is not announced to it).
func (h *Hub) Subscribe(ctx context.Context, name string) (wake <-chan struct{}, cancel func()) {
	return h.SubscribeFor(ctx, name, "")
}

// SubscribeFor is Subscribe for a waiter of owner: a release announced for
// another owner, which a reservation keeps the name for (see
// store.NoticeSep), does not wake it; "" subscribes to every release.
func (h *Hub) SubscribeFor(ctx context.Context, name, owner string) (wake <-chan struct{}, cancel func()) {
	s, cancel := h.subscribe(ctx, name, owner, true, nil)
	return s.ch, cancel
}

// SubscribeCounted is Subscribe with a count of the notices sent to the
// subscription (one per announced release, and one per reconnection of the
// listening connection). The channel holds one wake-up, so notices that
// arrive while one is pending merge there; the count does not merge them,
// so a waiter that needs a number of events reads it from sent rather than
// from its wake-ups, whenever it wakes.
//
// quiet, when not nil, is asked at each announced release of name, on the
// hub's goroutine and under its lock (so it must not call the hub), whether
// the waiter would go back to sleep on it (a fair waiter while a lease of
// its own Locker holds the name: the notice echoes that Locker's hand-off,
// and the lease's release wakes the waiter by itself); the notice is then
// counted but wakes nobody. A reconnection's wake-up is always sent.
func (h *Hub) SubscribeCounted(ctx context.Context, name string, quiet func() bool) (wake <-chan struct{}, sent func() uint64, cancel func()) {
	s, cancel := h.subscribe(ctx, name, "", true, quiet)
	return s.ch, s.sent.Load, cancel
}

// SubscribeUnmarked is Subscribe for a name whose releases are announced
// whether or not anybody listens (a semaphore's: its grants' rows, not
// dblock_locks'), so no mark is written.
func (h *Hub) SubscribeUnmarked(name string) (wake <-chan struct{}, cancel func()) {
	s, cancel := h.subscribe(context.Background(), name, "", false, nil)
	return s.ch, cancel
}

func (h *Hub) subscribe(ctx context.Context, name, owner string, mark bool, quiet func() bool) (s *sub, cancel func()) {
	s = &sub{ch: make(chan struct{}, 1), owner: owner, unmarked: !mark, quiet: quiet}
	if !h.add(name, s) {
		return s, func() {}
	}
	if mark {
		h.mark(ctx, name)
	}
	var once sync.Once
	return s, func() { once.Do(func() { h.remove(name, s) }) }
}

// add registers s for name and starts the hub's goroutines on the first
// subscription; false once the hub is closed.
func (h *Hub) add(name string, s *sub) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	m := h.subs[name]
	if m == nil {
		m = map[*sub]struct{}{}
		h.subs[name] = m
	}
	m[s] = struct{}{}
	if !h.started && h.db.Dialect.Caps().Notify {
		h.started = true
		h.wg.Add(2)
		go h.run()
		go h.renewMarks()
	}
	return true
}

// remove unregisters s. The name's mark is remembered until it is due
// (dueMarks forgets it then): a call that waits for the name again
// meanwhile needs no new mark.
func (h *Hub) remove(name string, s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m := h.subs[name]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(h.subs, name)
		}
	}
}

// Close stops the listening connection (discarding it) and waits for the
// hub's goroutine to end. Subscriptions stay valid but never wake again.
func (h *Hub) Close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	return nil
}

// notify wakes the subscribers of a notice: the payload as a name, and, for
// each store.NoticeSep in it, the name before it for the owner after it
// (a name may contain the separator: a notice wakes every reading's
// subscribers, too many rather than too few).
func (h *Hub) notify(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wake(payload, "")
	for i := 0; i < len(payload); i++ {
		if payload[i] == store.NoticeSep {
			h.wake(payload[:i], payload[i+1:])
		}
	}
}

// wake wakes name's subscribers, only those of owner and those of every
// owner when owner is set, and counts the notice for those whose quiet
// test holds without waking them. h.mu is held.
func (h *Hub) wake(name, owner string) {
	for s := range h.subs[name] {
		if owner != "" && s.owner != "" && s.owner != owner {
			continue
		}
		s.send(s.quiet != nil && s.quiet())
	}
}

// send counts a notice and wakes s, unless quiet or a wake-up is pending.
func (s *sub) send(quiet bool) {
	s.sent.Add(1)
	if quiet {
		return
	}
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

func (h *Hub) notifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.subs {
		for s := range m {
			s.send(false) // Notices may have been missed: every subscriber looks.
		}
	}
}

// run keeps one listening connection open until Close, reconnecting with
// capped, jittered backoff.
func (h *Hub) run() {
	defer h.wg.Done()
	backoff := reconnectMin
	for attempt := 1; ; attempt++ {
		l, err := h.db.Listen(h.ctx, store.NotifyChannel)
		if err != nil {
			if h.ctx.Err() != nil {
				return
			}
			h.logger.LogAttrs(h.ctx, slog.LevelWarn, "dblock: wake-up listener unavailable, waiters poll",
				slog.Int("attempt", attempt), slog.String("error", err.Error()))
			if !sleep(h.ctx, jitter(backoff)) {
				return
			}
			backoff = min(backoff*2, reconnectMax)
			continue
		}
		// Releases announced before this connection listened were missed
		// (also on the first connection: waiters subscribed before it).
		h.notifyAll()
		err = h.listen(l)
		_ = l.Close()
		if h.ctx.Err() != nil {
			return
		}
		h.logger.LogAttrs(h.ctx, slog.LevelWarn, "dblock: wake-up listener lost, reconnecting",
			slog.Int("attempt", attempt), slog.String("error", err.Error()))
		// Waiters may have missed a release while the connection was dying.
		h.notifyAll()
		backoff = reconnectMin
		if !sleep(h.ctx, jitter(backoff)) {
			return
		}
	}
}

func (h *Hub) listen(l store.Listener) error {
	for {
		payload, err := l.Wait(h.ctx)
		if err != nil {
			return err
		}
		h.notify(payload)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// jitter spreads a pause over [d/2, d] (backoff.Jitter).
var jitter = backoff.Jitter
