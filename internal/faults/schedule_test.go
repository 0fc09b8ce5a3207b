package faults

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/schedule"
)

// TestFaultScheduleAnswerLost: a scheduled job's take of its lock, or its
// claim of the slot, commits on the server and its answer is lost (every
// proxied connection cut). The run must read it back and run the slot:
// the job runs once, where without the read-back the take's lease kept
// every replica off the slot until it expired, and the claim marked the
// slot as run when nobody ran it. A second replica that fires the same
// slot then skips it.
func TestFaultScheduleAnswerLost(t *testing.T) {
	for _, kind := range serverKinds() {
		for _, step := range []string{"take", "claim"} {
			t.Run(string(kind)+"/"+step, func(t *testing.T) {
				t.Parallel()
				scheduleAnswerLost(t, dbtest.New(t, kind), step)
			})
		}
	}
}

func scheduleAnswerLost(t *testing.T, iso *dbtest.Isolated, step string) {
	px := newProxy(t, iso)
	const spec, name = "@every 1h", "answer-lost-job"
	slot := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	now := func() time.Time { return slot.Add(30 * time.Second) }
	var runs atomic.Int32
	fn := func(context.Context) error { runs.Add(1); return nil }
	fire := func(s *schedule.Scheduler) func() {
		job, err := s.Job(spec, name, fn)
		if err != nil {
			t.Fatal(err)
		}
		return job.Run
	}
	a, err := schedule.New(px.open(t), &schedule.Config{Logger: quiet, Owner: "a", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	committed := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if step == "take" {
			h, err := iso.Store().LeaseHolder(ctx, nil, name)
			return err == nil && strings.HasPrefix(h.Owner, "a#")
		}
		last, err := iso.Store().LastSlot(ctx, name)
		return err == nil && last.Equal(slot)
	}
	run := fire(a)
	_ = cutWhile(t, px, committed, func(context.Context) error { run(); return nil })
	if n := runs.Load(); n != 1 {
		t.Fatalf("the job ran %d times for the slot whose %s's answer was lost, want once", n, step)
	}
	b, err := schedule.New(iso.DB, &schedule.Config{Logger: quiet, Owner: "b", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	fire(b)()
	if n := runs.Load(); n != 1 {
		t.Fatalf("the job ran %d times once a second replica fired the slot, want once", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if last, err := iso.Store().LastSlot(ctx, name); err != nil || !last.Equal(slot) {
		t.Fatalf("the job's last slot = %v, %v; want %v", last, err, slot)
	}
}
