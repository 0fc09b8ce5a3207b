package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/mode"
)

// job is one scheduled job.
type job struct {
	name     string
	schedule cron.Schedule
	fn       func(ctx context.Context) error
	o        jobOptions
}

// newJob checks Add's input and builds the job.
func (s *Scheduler) newJob(spec, name string, fn func(ctx context.Context) error, opts []Option) (*job, error) {
	if err := dblock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("schedule: add: %w", err)
	}
	if fn == nil {
		return nil, fmt.Errorf("schedule: add %q: %w: nil job", name, dblock.ErrInvalidOption)
	}
	sched, err := s.parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule: add %q: %w: spec %q: %w", name, dblock.ErrInvalidOption, spec, err)
	}
	j := &job{name: name, schedule: sched, fn: fn}
	for _, opt := range opts {
		if opt != nil {
			opt(&j.o)
		}
	}
	if err := j.o.validate(); err != nil {
		return nil, fmt.Errorf("schedule: add %q: %w", name, err)
	}
	return j, nil
}

func (o jobOptions) validate() error {
	if o.atMost != 0 {
		if err := mode.ValidateTTL(o.atMost); err != nil {
			return fmt.Errorf("AtMostFor: %w", err)
		}
	}
	if o.atLeast != 0 {
		if err := mode.ValidateTTL(o.atLeast); err != nil {
			return fmt.Errorf("AtLeastFor: %w", err)
		}
	}
	if o.atMost != 0 && o.atLeast > o.atMost {
		return fmt.Errorf("%w: AtLeastFor %v is longer than AtMostFor %v", dblock.ErrInvalidOption, o.atLeast, o.atMost)
	}
	return nil
}

// parse reads a cron spec in the Scheduler's time zone; an @every schedule
// is aligned on the epoch (see Add).
func (s *Scheduler) parse(spec string) (cron.Schedule, error) {
	sched, err := s.parser.Parse(spec)
	if err != nil {
		return nil, err
	}
	switch c := sched.(type) {
	case cron.ConstantDelaySchedule:
		return aligned{c.Delay}, nil
	case *cron.SpecSchedule:
		if c.Location == time.Local {
			c.Location = s.cfg.Location
		}
	}
	return sched, nil
}

// aligned is an @every schedule whose slots are the multiples of its
// interval since the Unix epoch (robfig's counts from each replica's start,
// so replicas would disagree on the slots).
type aligned struct{ every time.Duration }

func (a aligned) Next(t time.Time) time.Time { return t.Truncate(a.every).Add(a.every) }

// loop fires j at each of its slots by the Scheduler's clock until Stop;
// a slot that comes while a run of j is still going is skipped here (the
// run holds j's lock, so no replica can run it meanwhile either).
func (j *job) loop(s *Scheduler) {
	if j.o.catchUp {
		j.catchUp(s)
	}
	for {
		slot := j.schedule.Next(s.cfg.Now())
		if slot.IsZero() {
			return // A schedule that never fires again.
		}
		t := time.NewTimer(slot.Sub(s.cfg.Now()))
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		// The timer may fire a hair early by the (offset) clock: the slot
		// is the nominal time, whatever the clock says now.
		(&run{s: s, j: j, slot: slot}).do()
	}
}

// catchUp runs the latest slot due since the job's last recorded one, if
// it never ran (every replica was down then). A job that never ran has
// nothing to catch up.
func (j *job) catchUp(s *Scheduler) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TTL)
	last, err := s.db.LastSlot(ctx, j.name)
	cancel()
	if err != nil {
		s.parts.Logger.LogAttrs(context.Background(), slog.LevelWarn, "schedule: catch-up: last slot unreadable",
			slog.String("job", j.name), slog.String("error", err.Error()))
		return
	}
	if last.IsZero() {
		return
	}
	if due := latestDue(j.schedule, last, s.cfg.Now()); !due.IsZero() {
		(&run{s: s, j: j, slot: due, catchUp: true}).do()
	}
}

// maxCatchUpSteps bounds the walk from the last slot to now (a per-second
// schedule down for a day takes 86,400 steps).
const maxCatchUpSteps = 1 << 20

// latestDue returns the latest slot of sched after last and at or before
// now, or zero if there is none (or the walk is too long to be worth it).
func latestDue(sched cron.Schedule, last, now time.Time) time.Time {
	var due time.Time
	t := last
	for range maxCatchUpSteps {
		next := sched.Next(t)
		if next.IsZero() || next.After(now) {
			return due
		}
		due, t = next, next
	}
	return time.Time{}
}
