package schedule

import (
	"context"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/store"
)

// A run's take or claim whose answer was lost (its connection broke after
// the statement may have committed) is read back rather than given up: the
// take's lease would otherwise keep every replica off the slot until it
// expired, and the claim's record would mark the slot as run when nobody
// ran it.

// settleTake reads back a take whose answer was lost (err): true, with the
// lease kept, when the job's row names this run's owner with an unexpired
// lease that no handle of this Scheduler has.
func (r *run) settleTake(err error, reqStart time.Time) bool {
	var h store.Holder
	read := func(ctx context.Context) (err error) {
		h, err = r.s.db.LeaseHolder(ctx, nil, r.j.name)
		return err
	}
	if rerr := leasekeeper.ReadBack(context.Background(), r.s.cfg.TTL, pauseFirst, pauseMost, read); rerr != nil {
		r.log(slog.LevelWarn, "schedule: take the job's lock failed, and reading it back too; slot skipped here (a lock it took expires by itself)",
			slog.String("error", err.Error()), slog.String("read_back", rerr.Error()))
		return false
	}
	token := dblock.Token(h.Version)
	if !h.Held() || h.Owner != r.owner || !h.ExpiresAt.After(h.Now) || h.Reentry <= r.s.parts.Keeper.Handles(r.j.name, r.owner, token) {
		r.log(slog.LevelWarn, "schedule: take the job's lock failed; slot skipped here", slog.String("error", err.Error()))
		return false
	}
	r.log(slog.LevelInfo, "schedule: a take with a lost answer had taken the job's lock; keeping it", slog.String("error", err.Error()))
	return r.keep(store.AcquireResult{Acquired: true, Token: token, Reentry: h.Reentry}, reqStart)
}

// settleClaim reads back a claim whose answer was lost (err) under the
// job's lock: the slot recorded means this claim recorded it, since no
// other replica can claim while this run's lease holds the lock (checked
// after the read); an earlier slot recorded means it did not, and the claim
// is sent again. It reports whether the slot is this run's.
func (r *run) settleClaim(ctx context.Context, err error) (bool, error) {
	var last time.Time
	read := func(ctx context.Context) (err error) {
		last, err = r.s.db.LastSlot(ctx, r.j.name)
		return err
	}
	if rerr := leasekeeper.ReadBack(ctx, r.s.cfg.TTL, pauseFirst, pauseMost, read); rerr != nil {
		return false, err
	}
	switch {
	case r.lease.Err() != nil:
		return false, r.lease.Err()
	case last.Equal(r.slot):
		r.log(slog.LevelInfo, "schedule: a claim with a lost answer had recorded the slot; running it", slog.String("error", err.Error()))
		return true, nil
	case last.Before(r.slot):
		return r.s.db.ClaimSlot(ctx, r.j.name, r.slot)
	}
	return false, nil // A later slot ran.
}
