package schedule

import (
	"context"
	"time"
)

type slotKey struct{}

// Slot returns the slot a job's run is for (its nominal firing time), from
// the context the job was given; false outside a run.
func Slot(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(slotKey{}).(time.Time)
	return t, ok
}

// withSlot is ctx carrying slot for Slot.
func withSlot(ctx context.Context, slot time.Time) context.Context {
	return context.WithValue(ctx, slotKey{}, slot)
}
