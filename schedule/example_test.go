package schedule_test

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/schedule"
)

// A nightly report on every replica, run once per night.
func Example() {
	db, cleanup := exampledb.Open("schedule.db")
	defer cleanup()
	report := func(ctx context.Context) error { return nil }
	s, err := nightly(db, report)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println(s.Stop(ctx))
	// Output: <nil>
}

// nightly is the package doc's example.
func nightly(db *dialect.DB, report func(context.Context) error) (*schedule.Scheduler, error) {
	s, _ := schedule.New(db, nil)
	_ = s.Add("0 3 * * *", "nightly-report", report, schedule.AtMostFor(time.Hour), schedule.AtLeastFor(time.Minute))
	s.Start()
	return s, nil
}

// The README's recipe.
func readme(ctx context.Context, db *dialect.DB, report func(context.Context) error) error {
	s, err := schedule.New(db, nil)
	if err != nil {
		return err
	}
	if err := s.Add("0 3 * * *", "nightly-report", report, schedule.AtMostFor(time.Hour)); err != nil {
		return err
	}
	s.Start()
	defer s.Stop(context.WithoutCancel(ctx))
	<-ctx.Done() // Serve until shutdown.
	return nil
}

// Slot tells a job the slot it runs for.
func ExampleSlot() {
	db, cleanup := exampledb.Open("schedule-slot.db")
	defer cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan time.Time, 1)
	// A clock a moment before midnight UTC fires the daily slot at once.
	midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	offset := time.Until(midnight) - 100*time.Millisecond
	s, _ := schedule.New(db, &schedule.Config{Location: time.UTC, Now: func() time.Time { return time.Now().Add(offset) }})
	_ = s.Add("0 0 * * *", "daily", func(ctx context.Context) error {
		slot, _ := schedule.Slot(ctx)
		done <- slot
		return nil
	})
	s.Start()
	fmt.Println((<-done).Equal(midnight))
	fmt.Println(s.Stop(ctx))
	// Output:
	// true
	// <nil>
}

var _ = readme

// A job for a robfig/cron Cron of the caller's.
func ExampleScheduler_Job() {
	db, cleanup := exampledb.Open("schedule-job.db")
	defer cleanup()
	report := func(ctx context.Context) error { return nil }
	s, _ := schedule.New(db, nil)
	c := cron.New()
	job, err := s.Job("0 3 * * *", "nightly-report", report, schedule.AtMostFor(time.Hour))
	if err == nil {
		_, err = c.AddJob("0 3 * * *", job)
	}
	fmt.Println(err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.Stop(ctx)
	// Output: <nil>
}
