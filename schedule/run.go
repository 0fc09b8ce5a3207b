package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/leasekeeper"
	"github.com/dblock-go/dblock/internal/store"
)

// run is one firing of a job for one slot, in steps: look whether the slot
// ran (skip), take the job's lock (or skip: a run holds it), claim the slot
// (or skip: it ran meanwhile), run the job under the lease, and end the
// lease (kept until the lower bound).
type run struct {
	s       *Scheduler
	j       *job
	slot    time.Time
	catchUp bool

	owner string
	lease *dblock.Lease
}

func (r *run) do() {
	if !r.s.parts.Life.Enter() {
		return
	}
	defer r.s.parts.Life.Leave()
	if r.ranAlready() || !r.take() {
		return
	}
	if !r.claim() {
		r.release()
		return
	}
	r.execute()
	r.release()
}

// ranAlready reads, without taking anything, whether the slot (or a later
// one) was claimed: a replica whose clock is behind fires slots that ran,
// and must not take the job's lock from one firing a slot that has not.
func (r *run) ranAlready() bool {
	ctx, cancel := context.WithTimeout(context.Background(), r.s.cfg.TTL)
	defer cancel()
	last, err := r.s.db.LastSlot(ctx, r.j.name)
	if err != nil || last.Before(r.slot) {
		return false // Unreadable: the claim decides.
	}
	r.log(slog.LevelDebug, "schedule: the slot ran already; skipped")
	return true
}

// A run's pauses between tries (a take waiting for a run of an earlier
// slot, a read of a lost answer): from pauseFirst, doubling, up to
// pauseMost, jittered.
const (
	pauseFirst = 5 * time.Millisecond
	pauseMost  = 250 * time.Millisecond
)

// take acquires the job's lock; false when another run holds it (or the
// statement failed; one whose answer was lost is read back, settleTake). A run of an earlier slot, or a row locked by another
// statement, is waited for, until the slot after this one is due: it may be a replica whose clock is behind, firing
// a slot that never ran, at the moment this one fires its own, and skipping
// would lose this slot (its successor's claim would then pass it by). A run
// of this slot or a later one means this slot ran or will be skipped there
// too: skip.
func (r *run) take() bool {
	s := r.s
	r.owner = s.cfg.Owner + "#" + r.slot.UTC().Format(time.RFC3339Nano)
	if len(r.owner) > dblock.MaxOwnerLen {
		r.owner = r.owner[len(r.owner)-dblock.MaxOwnerLen:]
	}
	ttl := s.cfg.TTL
	if r.j.o.atMost > 0 && r.j.o.atMost < ttl {
		ttl = r.j.o.atMost
	}
	until := r.j.schedule.Next(r.slot)
	pause := pauseFirst
	for {
		res, reqStart, err := r.acquire(ttl)
		switch {
		case err != nil && leasekeeper.OutcomeUnknown(err):
			return r.settleTake(err, reqStart)
		case err != nil:
			r.log(slog.LevelWarn, "schedule: take the job's lock failed; slot skipped here", slog.String("error", err.Error()))
			return false
		case res.Acquired:
			return r.keep(res, reqStart)
		}
		// Wait for a run of an earlier slot, and for a row another
		// statement has locked this instant (no owner: a replica's acquire
		// or release in flight, or a transaction's hold).
		held, ok := slotOf(res.Holder.Owner)
		earlier := ok && held.Before(r.slot) || res.Holder.Owner == "" && res.Holder.Mode != dblock.ModeRead
		if !earlier || !s.cfg.Now().Before(until) {
			r.log(slog.LevelDebug, "schedule: the job runs elsewhere; slot skipped here", slog.String("holder", res.Holder.Owner))
			return false
		}
		t := time.NewTimer(backoff.Jitter(pause))
		select {
		case <-s.stop:
			t.Stop()
			return false
		case <-t.C:
		}
		pause = min(2*pause, pauseMost)
	}
}

// acquire runs one acquire statement for the job's lock.
func (r *run) acquire(ttl time.Duration) (store.AcquireResult, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.s.cfg.TTL)
	defer cancel()
	reqStart := time.Now()
	res, err := r.s.db.AcquireLease(ctx, nil, store.AcquireParams{
		Name: r.j.name, Owner: r.owner, Mode: dblock.ModeSchedule, TTL: ttl,
		Metadata: fmt.Sprintf("slot %s", r.slot.UTC().Format(time.RFC3339)),
	})
	return res, reqStart, err
}

// keep hands the lease just acquired to the Keeper; false when stopping.
func (r *run) keep(res store.AcquireResult, reqStart time.Time) bool {
	s := r.s
	lease, err := s.parts.Keeper.Start(leasekeeper.Params{
		Name: r.j.name, Owner: r.owner, Mode: dblock.ModeSchedule, Token: res.Token, TTL: s.cfg.TTL,
		MaxHold: r.j.o.atMost, MinHold: r.j.o.atLeast, ReqStart: reqStart,
	})
	if err != nil {
		return false // Stopping: the Keeper released it.
	}
	s.parts.Events.Acquired(r.j.name, r.owner, res.Token, time.Since(reqStart))
	r.lease = lease
	return true
}

// slotOf reads the slot of a run from its lock's owner (Config.Owner, '#',
// the slot).
func slotOf(owner string) (time.Time, bool) {
	i := strings.LastIndexByte(owner, '#')
	if i < 0 {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, owner[i+1:])
	return t, err == nil
}

// claim records the slot as the job's last; false when it ran already
// (another replica, whose clock fired it first, claimed it). A claim whose
// answer was lost is read back (settleClaim).
func (r *run) claim() bool {
	lctx, lcancel := r.lease.Context(context.Background())
	defer lcancel()
	ctx, cancel := context.WithTimeout(lctx, r.s.cfg.TTL)
	defer cancel()
	claimed, err := r.s.db.ClaimSlot(ctx, r.j.name, r.slot)
	if err != nil && leasekeeper.OutcomeUnknown(err) {
		claimed, err = r.settleClaim(ctx, err)
	}
	if err != nil {
		r.log(slog.LevelWarn, "schedule: claim the slot failed; slot skipped here", slog.String("error", err.Error()))
		return false
	}
	if !claimed {
		r.log(slog.LevelDebug, "schedule: the slot ran already; skipped")
	}
	return claimed
}

// execute runs the job under a context cancelled when the lease is lost
// (at the AtMostFor bound, for one).
func (r *run) execute() {
	ctx, cancel := r.lease.Context(withSlot(context.Background(), r.slot))
	defer cancel()
	start := time.Now()
	err := r.safeRun(ctx)
	attrs := []slog.Attr{slog.Duration("took", time.Since(start)), slog.Int64("token", int64(r.lease.Token()))}
	switch {
	case err != nil:
		r.log(slog.LevelError, "schedule: job failed", append(attrs, slog.String("error", err.Error()))...)
	case r.lease.Err() != nil:
		r.log(slog.LevelWarn, "schedule: job ended after its lock was lost", append(attrs, slog.String("lost", r.lease.Err().Error()))...)
	default:
		r.log(slog.LevelInfo, "schedule: job ran", attrs...)
	}
}

// safeRun runs the job, turning a panic into an error.
func (r *run) safeRun(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.j.fn(ctx)
}

// release ends the lease: kept until the lower bound by the database
// clock when that is ahead (leasekeeper.Params.MinHold), else freed.
func (r *run) release() {
	ctx, cancel := context.WithTimeout(context.Background(), r.s.cfg.TTL)
	defer cancel()
	if err := r.lease.Release(ctx); err != nil && !errors.Is(err, dblock.ErrLost) {
		r.log(slog.LevelWarn, "schedule: release failed (the lock expires by itself)", slog.String("error", err.Error()))
	}
}

func (r *run) log(level slog.Level, msg string, attrs ...slog.Attr) {
	attrs = append([]slog.Attr{slog.String("job", r.j.name), slog.Time("slot", r.slot), slog.Bool("catch_up", r.catchUp)}, attrs...)
	r.s.parts.Logger.LogAttrs(context.Background(), level, msg, attrs...)
}
