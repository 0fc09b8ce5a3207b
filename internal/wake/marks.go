package wake

import (
	"context"
	"log/slog"
	"time"
)

// Marks of listening. A release announces its name only while the name's row
// is marked as listened for (store.MarkListened): announcing costs every
// releasing commit the server's notification lock, whether or not anybody
// listens. The hub marks a name when a call subscribes to it, before the
// call asks again, and renews the mark while the name has subscriptions.
// A write leaves the row marked for more than half the lifetime (it writes
// only where less is left); the hub asks again a quarter of the lifetime
// later, at its next round (rounds come every quarter), so the next write
// comes at most half the lifetime after the last and no mark lapses while
// a call waits. A mark that could not be written (no row yet, a row a
// pessimistic holder keeps locked, the database unreachable) is tried
// again at the next round; meanwhile the calls wait as they would without
// notifications, on their backoff and expiry timers.

// marks is the hub's record of its marks; its map is guarded by Hub.mu.
type marks struct {
	d       time.Duration        // A mark's lifetime, by the database clock.
	renewAt map[string]time.Time // By the local clock: a quarter of the lifetime after the write was sent.
}

// mark marks name's row unless this hub's mark of it is fresh.
func (h *Hub) mark(ctx context.Context, name string) {
	if !h.db.Dialect.Caps().Notify {
		return
	}
	h.mu.Lock()
	at, ok := h.marks.renewAt[name]
	h.mu.Unlock()
	if ok && time.Now().Before(at) {
		return
	}
	h.write(ctx, name)
}

// write marks name's row, in at most a quarter of a mark's lifetime, and
// records when to renew the mark, if the row exists.
func (h *Hub) write(ctx context.Context, name string) {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(ctx, h.marks.d/4)
	defer cancel()
	exists, err := h.db.MarkListened(ctx, name, h.marks.d)
	if err != nil {
		h.logger.LogAttrs(ctx, slog.LevelDebug, "dblock: could not mark a name as listened for; its waiters poll until the next try",
			slog.String("lock_key", name), slog.String("error", err.Error()))
		return
	}
	if !exists {
		return
	}
	h.mu.Lock()
	h.marks.renewAt[name] = sent.Add(h.marks.d / 4)
	h.mu.Unlock()
}

// renewMarks rewrites, every quarter of a mark's lifetime until Close, the
// marks of the names with subscriptions that are due.
func (h *Hub) renewMarks() {
	defer h.wg.Done()
	t := time.NewTicker(h.marks.d / 4)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		for _, name := range h.dueMarks() {
			h.write(h.ctx, name)
		}
	}
}

// dueMarks lists the names subscribed with marks (not SubscribeUnmarked
// alone) whose mark is due or missing, and
// forgets the due marks of names without subscriptions (they lapse in the
// rows by themselves).
func (h *Hub) dueMarks() []string {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, at := range h.marks.renewAt {
		if h.subs[name] == nil && !now.Before(at) {
			delete(h.marks.renewAt, name)
		}
	}
	var due []string
	for name, subs := range h.subs {
		if at, ok := h.marks.renewAt[name]; (!ok || !now.Before(at)) && marked(subs) {
			due = append(due, name)
		}
	}
	return due
}

// marked reports whether one of a name's subscriptions wants its row marked.
func marked(subs map[*sub]struct{}) bool {
	for s := range subs {
		if !s.unmarked {
			return true
		}
	}
	return false
}
