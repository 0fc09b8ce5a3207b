package pessimistic

import (
	"context"
	"errors"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

// A pessimistic hold never writes its row, so the history's trigger does not
// see it end: while the history is enabled, the Locker writes the hold's
// entries itself (one per name) once the hold has ended. Release writes
// them before it returns, within its context; a loss's are written in the
// background, and the hold's Release (and Close) waits for them. A hold's
// transaction cannot carry them (a rolled-back hold or a dead connection
// would take them along), so a process killed while holding leaves none.
// An entry's token is the hold's (zero unless it asked for one with
// dblock.WithToken).

// historyTimeout bounds the write of a hold's entries.
const historyTimeout = 5 * time.Second

// recordEnd writes h's entries, ended how, when the history is enabled,
// within ctx; a failed write is logged (the hold has ended either way).
func (l *Locker) recordEnd(ctx context.Context, h *hold, how string) {
	if !l.db.HistorySupported() || l.db.HistoryKnownOff() || ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, historyTimeout)
	defer cancel()
	if !l.db.HistoryRecording(ctx) {
		return
	}
	l.mu.Lock()
	entries := make([]store.HistoryEntry, len(h.names))
	for i, n := range h.names {
		entries[i] = store.HistoryEntry{Name: n, Owner: h.owner, Token: int64(h.tokens[n]), Mode: h.historyMode(),
			AcquiredAt: h.lockedAt, How: how}
	}
	l.mu.Unlock()
	for _, e := range entries {
		if err := l.db.RecordHistory(ctx, e); err != nil {
			l.log.Warn("pessimistic: history entry not written", "lock_key", e.Name, "owner", e.Owner, "ended", how, "error", err)
		}
	}
}

// recordLoss writes the entries of h, lost for reason, in the background;
// the hold's last Release waits for them (awaitRecording).
func (l *Locker) recordLoss(h *hold, reason error) {
	if !l.db.HistorySupported() || l.db.HistoryKnownOff() {
		return
	}
	how := store.HistoryAborted
	if errors.Is(reason, dblock.ErrConnLost) {
		how = store.HistoryConnectionLost
	}
	done := make(chan struct{})
	l.mu.Lock()
	h.recording = done
	l.mu.Unlock()
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		defer close(done)
		l.recordEnd(context.Background(), h, how)
	}()
}

// awaitRecording waits, within ctx, for the entries of h's loss to be
// written, so that the hold's connections are back when Release returns.
func (l *Locker) awaitRecording(ctx context.Context, h *hold) {
	l.mu.Lock()
	done := h.recording
	l.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// historyMode is the mode of h's entries: read for a shared hold.
func (h *hold) historyMode() string {
	if h.shared {
		return dblock.ModeRead
	}
	return dblock.ModePessimistic
}
