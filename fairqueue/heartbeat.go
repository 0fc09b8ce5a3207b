package fairqueue

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// beats are the waiter rows of this Locker, refreshed together by one
// statement per heartbeat interval.
type beats struct {
	mu  sync.Mutex
	ids map[int64]struct{}
}

func (b *beats) add(id int64) {
	b.mu.Lock()
	b.ids[id] = struct{}{}
	b.mu.Unlock()
}

func (b *beats) remove(id int64) {
	b.mu.Lock()
	delete(b.ids, id)
	b.mu.Unlock()
}

func (b *beats) snapshot() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]int64, 0, len(b.ids))
	for id := range b.ids {
		ids = append(ids, id)
	}
	return ids
}

// heartbeat refreshes every waiter row of this Locker each heartbeat
// interval until Close. A failed statement is retried sooner; a waiter whose
// row died meanwhile finds out from its next check and queues again.
func (l *Locker) heartbeat() {
	defer l.bg.Done()
	d := l.cfg.HeartbeatInterval
	t := time.NewTimer(d)
	defer t.Stop()
	for attempt := 1; ; attempt++ {
		select {
		case <-t.C:
		case <-l.life.Closing:
			return
		}
		ids := l.beats.snapshot()
		if len(ids) == 0 {
			t.Reset(d)
			continue
		}
		unlock := l.lockWrites()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		l.count()
		l.stats.heartbeats.Add(1)
		_, err := l.db.HeartbeatWaiters(ctx, nil, ids, l.cfg.HeartbeatTimeout)
		cancel()
		unlock()
		if err != nil {
			l.logger.LogAttrs(context.Background(), slog.LevelWarn, "fairqueue: heartbeat failed, retrying",
				slog.Int("attempt", attempt), slog.Int("waiters", len(ids)), slog.String("error", err.Error()))
			t.Reset(jitter(max(d/4, l.cfg.PollMin)))
			continue
		}
		attempt = 0
		t.Reset(d)
	}
}
