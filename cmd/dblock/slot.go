package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	lockmode "github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/schedule"
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

// slotOf returns the slot of spec at now (schedule.LatestSlot); zero
// without a spec.
func slotOf(spec string, now time.Time) (time.Time, error) {
	if spec == "" {
		return time.Time{}, nil
	}
	slot, err := schedule.LatestSlot(spec, now)
	switch {
	case err != nil:
		return time.Time{}, withCode(exitUsage, fmt.Errorf("exec: --slot: %w", err))
	case slot.IsZero():
		return time.Time{}, usageErrorf("exec: --slot %q: no slot in the last year", spec)
	}
	return slot, nil
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
