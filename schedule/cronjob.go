package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock"
)

// Job wraps fn as a cron.Job for a cron.Cron of the caller's, on the same
// spec: each Run is the slot of spec at or before this replica's clock (the
// time the Cron fired it for), run as Add's jobs are — once per slot across
// replicas, under the job's lock, with the options' bounds. CatchUp does
// not apply (a Cron has no start hook): use Add and Start for it. Bad input
// is refused as by Add.
//
//	c := cron.New()
//	job, err := s.Job("0 3 * * *", "nightly-report", report, schedule.AtMostFor(time.Hour))
//	if err == nil {
//		_, err = c.AddJob("0 3 * * *", job)
//	}
func (s *Scheduler) Job(spec, name string, fn func(ctx context.Context) error, opts ...Option) (cron.Job, error) {
	j, err := s.newJob(spec, name, fn, opts)
	if err != nil {
		return nil, err
	}
	return cron.FuncJob(func() {
		slot := latestSlot(j.schedule, s.cfg.Now().Add(fireSlack))
		if slot.IsZero() {
			return
		}
		(&run{s: s, j: j, slot: slot}).do()
	}), nil
}

// fireSlack is added to the clock when a Cron's firing looks for its slot:
// a Cron may fire a hair before the second it was due.
const fireSlack = 100 * time.Millisecond

// LatestSlot returns the slot of the cron spec at now: its latest time at
// or before now (@every slots are multiples of the interval since the Unix
// epoch), in spec's time zone (CRON_TZ= or TZ= prefix) or time.Local. A bad
// spec is an error wrapping dblock.ErrInvalidOption; a spec with no time in
// the last year gives zero.
func LatestSlot(spec string, now time.Time) (time.Time, error) {
	sched, err := parser.Parse(spec)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule: %w: spec %q: %w", dblock.ErrInvalidOption, spec, err)
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		sched = aligned{every.Delay}
	}
	return latestSlot(sched, now), nil
}

// latestSlot returns sched's latest time at or before now, walking from
// ever further back (a yearly spec looks back a year, an every-second one a
// minute); zero if there is none within a year.
func latestSlot(sched cron.Schedule, now time.Time) time.Time {
	for _, back := range []time.Duration{time.Minute, time.Hour, 25 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		if due := latestDue(sched, now.Add(-back), now); !due.IsZero() {
			return due
		}
	}
	return time.Time{}
}
