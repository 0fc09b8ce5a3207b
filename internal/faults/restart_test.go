package faults

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/faults/history"
	"github.com/dblock-go/dblock/optimistic"
)

// TestFaultRestartUnderLoad restarts a private PostgreSQL (pg_ctl -m fast
// restart) while four clients acquire, hold (renewed 1 s leases) and release
// two names, and one client holds a durable 10 s renewed lease. Afterwards:
// the durable lease is still held (the restart took well under its TTL) or
// was reported lost; every holder either kept renewing or was told it lost
// the lock, so the history of every client (unknown outcomes for the calls
// the restart cut) passes the overlap, token and porcupine checks; clients
// acquire again after the restart; and closing everything leaves no
// goroutines behind.
func TestFaultRestartUnderLoad(t *testing.T) {
	pg := newPrimary(t)
	baseline := runtime.NumGoroutine()
	db := openPG(t, pg.DSN())
	migrate(t, db)

	durableLocker, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const durableTTL = 10 * time.Second
	durable, err := durableLocker.Acquire(ctx, "durable", dblock.WithTTL(durableTTL), dblock.WithRenewal(true))
	if err != nil {
		t.Fatal(err)
	}

	const clients = 4
	recs := make([]*history.Recorder, clients)
	lockers := make([]*optimistic.Locker, clients)
	var wg sync.WaitGroup
	loopCtx, stopLoop := context.WithCancel(context.Background())
	for i := range clients {
		recs[i], _ = history.NewRecorder(fmt.Sprintf("c%d", i), "")
		l, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		lockers[i] = l
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("hot%d", i%2)
			workLoop(loopCtx, lockerClient{l: l}, recs[i], dblock.ModeOptimistic, name, time.Second, 0.05, func() bool { return true })
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	restartAt := time.Now()
	if err := pg.ctl("-l", pg.log, "-m", "fast", "-w", "-t", "60", "restart"); err != nil {
		stopLoop()
		wg.Wait()
		t.Fatalf("restart: %v", err)
	}
	restartTook := time.Since(restartAt)
	afterRestart := time.Now()
	time.Sleep(3 * time.Second)
	stopLoop()
	wg.Wait()

	// The durable lease.
	if err := durable.Err(); err != nil {
		if restartTook < durableTTL/2 {
			t.Errorf("the durable lease was lost although the restart took only %v: %v", restartTook, err)
		} else if !errors.Is(err, dblock.ErrLost) {
			t.Errorf("durable lease: Err() = %v, want nil or ErrLost", err)
		}
	} else {
		h, err := db.LeaseHolder(ctx, nil, "durable")
		if err != nil || h.Owner != durable.Owner() || !h.Held() {
			t.Errorf("the durable lease believes it holds the name, the database says owner %q held=%v (%v)", h.Owner, h.Held(), err)
		}
		if err := durable.Release(ctx); err != nil {
			t.Errorf("release the durable lease: %v", err)
		}
	}

	var all []history.Record
	for _, r := range recs {
		all = append(all, r.Records()...)
	}
	ops := history.Ops(all)
	grantedAfter := 0
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Outcome == history.OK && op.Call > afterRestart.UnixNano() {
			grantedAfter++
		}
	}
	sum := history.Summarize(ops)
	t.Logf("restart took %v; history: %v; %d acquisitions after the restart", restartTook.Round(time.Millisecond), sum, grantedAfter)
	if grantedAfter == 0 {
		t.Errorf("no acquisition succeeded in the 3 s after the restart")
	}
	res, err := history.Check(ops, 30*time.Second)
	if err != nil {
		t.Errorf("history check: %v", err)
	}
	if res == porcupine.Unknown {
		t.Logf("porcupine: no verdict within 30 s (the O(n) checks passed)")
	}

	// No goroutine leaks once everything is closed.
	for _, l := range lockers {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	if err := durableLocker.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	_ = db.Close()
	end := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > baseline+2 && time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline+2 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines after Close, %d before the test: leak?\n%s", n, baseline, tail(string(buf), 8000))
	}
}
