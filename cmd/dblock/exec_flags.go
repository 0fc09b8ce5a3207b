package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	lockmode "github.com/dblock-go/dblock/internal/mode"
)

// execFlags are exec's flags, and what check derives from them.
type execFlags struct {
	name, modeFlag, owner, slotSpec string
	fair, metadataArgs              bool
	spec                            execSpec
	ttl, maxHold, minHold, wait     optDuration

	slot time.Time // The slot of --slot (zero without).
}

// bind declares the flags on fs.
func (f *execFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "lock", "", "lock name")
	fs.StringVar(&f.modeFlag, "mode", dblock.ModeOptimistic, "optimistic or pessimistic")
	fs.BoolVar(&f.fair, "fair", false, "FIFO")
	fs.BoolVar(&f.spec.read, "read", false, "take the read lock")
	fs.BoolVar(&f.spec.semaphore, "semaphore", false, "take semaphore permits")
	fs.IntVar(&f.spec.limit, "limit", 0, "the semaphore's limit")
	fs.IntVar(&f.spec.permits, "permits", 1, "permits to take")
	fs.StringVar(&f.owner, "owner", "", "owner")
	fs.BoolVar(&f.metadataArgs, "metadata-args", false, "store CMD's arguments in the lock's metadata")
	fs.Var(&f.ttl, "ttl", "lease length")
	fs.Var(&f.maxHold, "max-hold", "cap on the whole hold")
	fs.Var(&f.minHold, "min-hold", "floor on the whole hold")
	fs.StringVar(&f.slotSpec, "slot", "", "run once per slot of this cron spec")
	fs.Var(&f.wait, "wait", "how long to wait")
}

// check validates the flags and CMD's arguments (usage errors), resolving
// the mode and the slot.
func (f *execFlags) check(argv []string) error {
	if f.name == "" {
		return usageErrorf("exec: --lock NAME is required (see dblock exec --help)")
	}
	if err := dblock.ValidateName(f.name); err != nil {
		return withCode(exitUsage, fmt.Errorf("exec: --lock: %w", err))
	}
	mode, err := f.spec.resolve(f.modeFlag, f.fair)
	if err != nil {
		return err
	}
	if f.ttl.set {
		if err := lockmode.ValidateTTL(f.ttl.d); err != nil {
			return withCode(exitUsage, fmt.Errorf("exec: --ttl: %w", err))
		}
	}
	if err := checkHoldFlags(mode, f.maxHold, f.minHold); err != nil {
		return err
	}
	if f.slot, err = slotOf(f.slotSpec, time.Now()); err != nil {
		return err
	}
	if f.owner != "" {
		if err := lockmode.ValidateOwner(f.owner); err != nil {
			return withCode(exitUsage, fmt.Errorf("exec: --owner: %w", err))
		}
	}
	if len(argv) == 0 {
		return usageErrorf("exec: no command given: dblock exec --lock %s -- CMD [ARGS...]", f.name)
	}
	return nil
}

// options are the acquisition's options.
func (f *execFlags) options(argv []string) []dblock.Option {
	opts := lockOptions(f.spec, f.owner, f.ttl.d, f.ttl.set, f.wait.d, f.wait.set, metadata(argv, f.metadataArgs))
	if f.maxHold.set {
		opts = append(opts, dblock.WithMaxHold(f.maxHold.d))
	}
	if f.minHold.set {
		opts = append(opts, dblock.WithMinHold(f.minHold.d))
	}
	return opts
}
