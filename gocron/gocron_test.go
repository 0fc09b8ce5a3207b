package dblockgocron_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/gocron"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/optimistic"
)

// record notes runs of a job by scheduler: start and end times.
type record struct {
	mu   sync.Mutex
	runs []run
}

type run struct {
	scheduler  int
	start, end time.Time
}

func (r *record) job(id int, hold time.Duration) func() {
	return func() {
		start := time.Now()
		time.Sleep(hold)
		r.mu.Lock()
		r.runs = append(r.runs, run{id, start, time.Now()})
		r.mu.Unlock()
	}
}

func newGocron(t *testing.T, opts ...gocron.SchedulerOption) gocron.Scheduler {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Two gocron schedulers on one database, each with the Locker on its own
// optimistic Locker: runs of the job never overlap.
func TestLockerOneRunAtATime(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		r := &record{}
		var scheds []gocron.Scheduler
		for id := range 2 {
			l, err := optimistic.New(iso.DB, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			s := newGocron(t, gocron.WithDistributedLocker(dblockgocron.Locker(l)))
			if _, err := s.NewJob(gocron.DurationJob(100*time.Millisecond), gocron.NewTask(r.job(id, 60*time.Millisecond)), gocron.WithName("report")); err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
		}
		for _, s := range scheds {
			s.Start()
		}
		time.Sleep(2 * time.Second)
		for _, s := range scheds {
			if err := s.Shutdown(); err != nil {
				t.Fatal(err)
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.runs) < 5 {
			t.Fatalf("%d runs in 2 s", len(r.runs))
		}
		for i, a := range r.runs {
			for _, b := range r.runs[i+1:] {
				if a.start.Before(b.end) && b.start.Before(a.end) {
					t.Fatalf("runs overlap: scheduler %d [%v, %v] and scheduler %d [%v, %v]",
						a.scheduler, a.start.Format(time.StampMicro), a.end.Format(time.StampMicro),
						b.scheduler, b.start.Format(time.StampMicro), b.end.Format(time.StampMicro))
				}
			}
		}
	})
}

// Two gocron schedulers with the Elector on one election: only the
// leader's runs jobs; when it closes, the other takes over.
func TestElectorLeaderRuns(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		r := &record{}
		var els []*dblockgocron.Elector
		var scheds []gocron.Scheduler
		for id := range 2 {
			e, err := election.New(iso.DB, "gocron-leader", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			el := dblockgocron.NewElector(e, "scheduler")
			els = append(els, el)
			s := newGocron(t, gocron.WithDistributedElector(el))
			if _, err := s.NewJob(gocron.DurationJob(100*time.Millisecond), gocron.NewTask(r.job(id, time.Millisecond))); err != nil {
				t.Fatal(err)
			}
			scheds = append(scheds, s)
		}
		leader := waitLeader(t, els)
		for _, s := range scheds {
			s.Start()
		}
		time.Sleep(time.Second)
		// Leadership may move as soon as the leader resigns, before its
		// scheduler has shut down: the other's runs count from there.
		switched := time.Now()
		if err := els[leader].Close(); err != nil {
			t.Fatal(err)
		}
		if err := scheds[leader].Shutdown(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond)
		other := 1 - leader
		if err := scheds[other].Shutdown(); err != nil {
			t.Fatal(err)
		}
		if err := els[other].Close(); err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		before, after := 0, 0
		for _, run := range r.runs {
			switch {
			case run.start.Before(switched) && run.scheduler != leader:
				t.Fatalf("scheduler %d ran a job while %d led", run.scheduler, leader)
			case run.start.Before(switched):
				before++
			case run.scheduler == other:
				after++
			}
		}
		if before == 0 || after == 0 {
			t.Fatalf("runs by the first leader %d, by the next %d: want both", before, after)
		}
	})
}

// waitLeader waits until one of els leads, and returns it.
func waitLeader(t *testing.T, els []*dblockgocron.Elector) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for i, el := range els {
			if el.IsLeader(context.Background()) == nil {
				return i
			}
		}
	}
	t.Fatal("no leader elected")
	return -1
}
