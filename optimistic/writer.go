package optimistic

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/obs"
)

// The write side of a read-write lock (package rwlock) is this mode's
// engine with two additions, made in the steps of an acquisition:
//   - a try refused because readers hold the name marks it wanted
//     (store.WantWrite), which keeps new readers out while the writer
//     waits; the writer that then takes the name clears the mark;
//   - an owner that holds the read lock of the name is refused at once
//     with leasemode.ErrUpgrade: it would wait for its own read lock.

func init() { leasemode.NewWriter = newWriter }

// writerSide is what a write side adds to a Locker.
type writerSide struct {
	wantFor time.Duration
}

func newWriter(handle *dialect.DB, c leasemode.WriterConfig) (leasemode.Writer, error) {
	l, err := newLocker(handle, &Config{
		Logger: c.Logger, Hooks: c.Hooks, Telemetry: c.Telemetry, PollMin: c.PollMin, PollMax: c.PollMax,
		ReleaseTimeout: c.ReleaseTimeout, StatementTimeout: c.StatementTimeout, DisableNotify: c.DisableNotify,
	}, "rwlock", dblock.ModeWrite)
	if err != nil {
		return nil, err
	}
	l.writer = &writerSide{wantFor: c.WantFor}
	return writer{l}, nil
}

// writer is the write side handed to rwlock: the Locker, and for a fair
// write, which rwlock records itself around the queue, its instruments and
// its acquisition unrecorded.
type writer struct{ *Locker }

func (w writer) Recorder() *obs.Recorder { return w.rec }

func (w writer) Take(ctx context.Context, name string, wait bool, start time.Time, opts []dblock.Option) (*dblock.Lease, error) {
	return w.acquireSince(ctx, name, wait, start, opts)
}

// refusedByReaders runs after a write try was refused: when readers hold
// the name, it refuses an owner among them (ErrUpgrade) and marks the name
// wanted otherwise.
func (a *acquisition) refusedByReaders() error {
	h := a.res.Holder
	if a.l.writer == nil || !h.Held() || h.Mode != dblock.ModeRead {
		return nil
	}
	if err := a.refuseUpgrade(); err != nil {
		return err
	}
	if !a.wait {
		return nil // A try does not keep readers out.
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.l.cfg.StatementTimeout)
	defer cancel()
	if err := a.l.db.WantWrite(ctx, a.name, a.l.writer.wantFor); err == nil {
		a.wanted = true
	}
	return nil
}

// refuseUpgrade refuses a write to an owner that holds a live share of the
// name (ErrUpgrade): it would wait for its own read lock. A write side
// asks before it queues behind other writers of its Locker, whose turn
// could come only after that read lock's release, and when readers refuse
// it.
func (a *acquisition) refuseUpgrade() error {
	if a.l.writer == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.l.cfg.StatementTimeout)
	defer cancel()
	mine, err := a.l.db.ShareHolder(ctx, a.name, a.o.Owner)
	if err == nil && mine.Owner == a.o.Owner && mine.ExpiresAt.After(mine.Now) {
		return fmt.Errorf("rwlock: acquire %q: %w: %w", a.name, dblock.ErrNotAcquired, leasemode.ErrUpgrade)
	}
	return nil
}

// tookWanted clears the mark of a writer that took the name after marking
// it wanted (a failure only leaves the mark to lapse by itself).
func (a *acquisition) tookWanted() {
	if !a.wanted {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.l.cfg.StatementTimeout)
	defer cancel()
	_ = a.l.db.UnwantWrite(ctx, a.name)
}
