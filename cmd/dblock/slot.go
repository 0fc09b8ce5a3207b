package main

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	lockmode "github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

// checkHoldFlags checks --max-hold and --min-hold: each a valid duration,
// the floor not above the cap, lease modes only.
func checkHoldFlags(mode string, maxHold, minHold optDuration) error {
	for _, f := range []struct {
		flag string
		d    optDuration
		why  string
	}{
		{"--max-hold", maxHold, "a pessimistic hold has no lease to cap (use a lease mode)"},
		{"--min-hold", minHold, "a pessimistic hold ends with its transaction (use a lease mode)"},
	} {
		if !f.d.set {
			continue
		}
		if err := lockmode.ValidateTTL(f.d.d); err != nil {
			return withCode(exitUsage, fmt.Errorf("exec: %s: %w", f.flag, err))
		}
		if mode == dblock.ModePessimistic {
			return usageErrorf("exec: %s: %s", f.flag, f.why)
		}
	}
	if minHold.set && (mode == dblock.ModeRead || mode == dblock.ModeSemaphore) {
		return usageErrorf("exec: --min-hold works with a lock, not with --read or --semaphore")
	}
	if maxHold.set && minHold.set && minHold.d > maxHold.d {
		return usageErrorf("exec: --min-hold %v is longer than --max-hold %v", minHold.d, maxHold.d)
	}
	return nil
}

// slotParser reads --slot: cron's five fields, six with seconds, or a
// descriptor.
var slotParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// slotOf returns the slot of spec at now: its latest time at or before now
// (@every slots are multiples of the interval since the epoch); zero
// without a spec.
func slotOf(spec string, now time.Time) (time.Time, error) {
	if spec == "" {
		return time.Time{}, nil
	}
	sched, err := slotParser.Parse(spec)
	if err != nil {
		return time.Time{}, usageErrorf("exec: --slot %q: %v", spec, err)
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		return now.Truncate(every.Delay), nil
	}
	// Walk from ever further back until a slot is found (a yearly spec
	// looks back a year, an every-second one a minute).
	for _, back := range []time.Duration{time.Minute, time.Hour, 25 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		var due time.Time
		for t, steps := now.Add(-back), 0; steps < 1<<20; steps++ {
			next := sched.Next(t)
			if next.IsZero() || next.After(now) {
				break
			}
			due, t = next, next
		}
		if !due.IsZero() {
			return due, nil
		}
	}
	return time.Time{}, usageErrorf("exec: --slot %q: no slot in the last year", spec)
}

// claimSlot records slot as the lock's last run; when it (or a later one)
// ran already, it releases the lock and says so, with exit 75 (done).
func (a *app) claimSlot(ctx context.Context, db *dialect.DB, lease *dblock.Lease, slot time.Time) (code int, done bool) {
	cctx, cancel := context.WithTimeout(ctx, holderTimeout)
	claimed, err := store.Of(db).ClaimSlot(cctx, lease.Name(), slot)
	cancel()
	if err == nil && claimed {
		return 0, false
	}
	a.releaseAfter(ctx, lease)
	if err != nil {
		return a.fail(fmt.Errorf("exec: claim slot %s of %q: %w", slot.Format(time.RFC3339), lease.Name(), err)), true
	}
	a.errorLine(fmt.Errorf("exec: %q: slot %s ran already (here or on another host): not run", lease.Name(), slot.Format(time.RFC3339)))
	return exitNotAcquired, true
}
