package faults

import (
	"context"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/reaper"
)

// The Locker modes the fault tests drive, by name, and the reaper pass.
func init() {
	lockerFactories[dblock.ModeOptimistic] = func(db *dialect.DB) (dblock.Locker, error) {
		return optimistic.New(db, &optimistic.Config{Logger: quiet})
	}
	lockerFactories[dblock.ModePessimistic] = func(db *dialect.DB) (dblock.Locker, error) {
		l, err := pessimistic.New(db, &pessimistic.Config{Logger: quiet})
		if err != nil {
			return nil, err
		}
		return l.AsLocker(), nil
	}
	lockerFactories[dblock.ModeFair] = func(db *dialect.DB) (dblock.Locker, error) {
		// Short heartbeats, so a killed waiter stops holding up the queue
		// within a second.
		return fairqueue.New(db, &fairqueue.Config{Logger: quiet,
			HeartbeatInterval: 250 * time.Millisecond, HeartbeatTimeout: time.Second})
	}
	reapOnce = func(ctx context.Context, iso *dbtest.Isolated) error {
		r, err := reaper.New(iso.DB, &reaper.Config{Logger: quiet, WaiterGrace: time.Millisecond})
		if err != nil {
			return err
		}
		_, err = r.RunOnce(ctx)
		return err
	}
}
