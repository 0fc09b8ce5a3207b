package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// rec is one acquire+release, in nanoseconds on the process's monotonic clock
// (time.Since(base)).
type rec struct {
	g          int
	acqStart   int64 // acquire called
	acqDone    int64 // acquire returned: held
	relDone    int64 // release returned
	relStarted int64 // release called
	// token and joined, for a scenario with a queue (worker.queued): the
	// grant's fencing token (the database's grant order) and when the
	// waiter joined the queue by the database clock (µs; 0: it never
	// queued).
	token, joined int64
}

// cell is one measured run: a scenario at some goroutine count.
type cell struct {
	sc         *scenario
	goroutines int
	contended  bool   // all goroutines on one name
	names      int    // names check: distinct names cycled (0: one per goroutine)
	skip       string // not run, and why
	err        error  // failed

	// before, when set, runs before each round (the names check fills the table).
	before func(ctx context.Context) error
	// keepRows skips emptying the lock tables after this cell's rounds.
	keepRows bool
	nameOf   func(g, i int) string

	// Sums over the rounds.
	rounds   int
	perRound []float64 // holds/s of each round, in round order
	ops      int
	errs     int
	firstErr error
	elapsed  time.Duration
	lat      []time.Duration // acquire+release
	wait     []time.Duration // acquire alone
	handoff  []time.Duration // release returned -> next acquire returned
	handoffX []time.Duration // the same, only where the next holder is another goroutine
	perG     []int
	mallocs  uint64        // whole process, over the measured windows
	bytesSum uint64        // whole process, over the measured windows
	cpuSum   time.Duration // user+system CPU of this process over the measured windows
	// srvSum is the same of the database servers on this machine, and
	// srvRounds the rounds it was read in (serverCPU).
	srvSum    time.Duration
	srvRounds int
	fifo      int           // acquisitions that overtook a waiter that started > fifoSlack earlier
	fifoMax   time.Duration // the largest such head start
	// fifoQueued: fifo counts overtakes in the queue's own order (tokens
	// against join times, both the database's), not by call times.
	fifoQueued bool
	overlaps   int // holds that overlapped (must be 0)
}

func (c *cell) allocs() float64 {
	if c.ops == 0 {
		return 0
	}
	return float64(c.mallocs) / float64(c.ops)
}

func (c *cell) bytes() float64 {
	if c.ops == 0 {
		return 0
	}
	return float64(c.bytesSum) / float64(c.ops)
}

func (c *cell) cpu() time.Duration {
	if c.ops == 0 {
		return 0
	}
	return c.cpuSum / time.Duration(c.ops)
}

// serverCPU is the database servers' CPU per operation, 0 where it could
// not be read in every round.
func (c *cell) serverCPU() time.Duration {
	if c.ops == 0 || c.srvRounds != c.rounds {
		return 0
	}
	return c.srvSum / time.Duration(c.ops)
}

func (c *cell) opsPerSec() float64 {
	if c.elapsed <= 0 {
		return 0
	}
	return float64(c.ops) / c.elapsed.Seconds()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fifoSlack is how much earlier a waiter must have called Acquire for being
// overtaken to count: the client cannot see when the database queued it.
const fifoSlack = 2 * time.Millisecond

// maxErrs bounds how many failed acquisitions a cell tolerates before its
// goroutines give up.
const maxErrs = 50

// runRound runs one round of c.sc on e and adds it to c: c.goroutines
// goroutines acquire and release in a loop for warm+dur; only the holds that
// start after warm and end before warm+dur are measured. c.nameOf(g, i) names
// goroutine g's i-th acquisition.
func runRound(ctx context.Context, e *env, c *cell, warm, dur time.Duration) {
	nameOf := c.nameOf
	if c.before != nil {
		if err := c.before(ctx); err != nil {
			c.err = err
			return
		}
	}
	inst, err := c.sc.setup(ctx, e, c.contended)
	if err != nil {
		c.err = fmt.Errorf("setup: %w", err)
		return
	}
	defer inst.close()

	workers := make([]*worker, c.goroutines)
	for g := range workers {
		w, err := inst.worker(ctx, g)
		if err != nil {
			c.err = fmt.Errorf("worker %d: %w", g, err)
			for _, w := range workers[:g] {
				w.close()
			}
			return
		}
		workers[g] = w
	}
	defer func() {
		for _, w := range workers {
			w.close()
		}
	}()

	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	warmAt, endAt := int64(warm), int64(warm+dur)

	// Acquires are cancelled shortly after the end (a peer may sleep for its
	// whole poll interval); releases get a generous bound of their own.
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	relCtx, cancelRel := context.WithTimeout(context.WithoutCancel(ctx), warm+dur+time.Minute)
	defer cancelRel()

	var (
		stopped atomic.Bool
		errs    atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		firstE  error
	)
	recs := make([][]rec, c.goroutines)
	for g, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]rec, 0, 4096)
			defer func() { recs[g] = mine }()
			for i := 0; !stopped.Load(); i++ {
				name := nameOf(g, i)
				t0 := now()
				release, err := w.acquire(runCtx, name)
				t1 := now()
				if err == nil {
					err = release(relCtx)
				}
				t2 := now()
				if err != nil {
					if stopped.Load() {
						return
					}
					mu.Lock()
					if firstE == nil {
						firstE = err
					}
					mu.Unlock()
					if errs.Add(1) >= maxErrs {
						return
					}
					_ = sleepCtx(runCtx, pollInterval)
					continue
				}
				if t0 >= warmAt && t2 <= endAt {
					r := rec{g: g, acqStart: t0, acqDone: t1, relStarted: t1, relDone: t2}
					if w.holdTimes != nil {
						held, releasing := w.holdTimes()
						r.acqDone, r.relStarted = int64(held.Sub(base)), int64(releasing.Sub(base))
					}
					if w.queued != nil {
						r.token, r.joined = w.queued()
					}
					mine = append(mine, r)
				}
			}
		}()
	}

	var m0, m1 runtime.MemStats
	_ = sleepCtx(ctx, warm)
	// The servers' CPU is read outside the process's own window: reading
	// /proc allocates, and costs this process CPU.
	srv0, srvOK0 := serverCPU()
	runtime.ReadMemStats(&m0)
	cpu0 := cpuTime()
	_ = sleepCtx(ctx, dur)
	cpu1 := cpuTime()
	runtime.ReadMemStats(&m1)
	srv1, srvOK1 := serverCPU()
	stopped.Store(true)
	grace := time.AfterFunc(2*time.Second, cancelRun)
	wg.Wait()
	grace.Stop()

	c.rounds++
	c.elapsed += dur

	c.errs += int(errs.Load())
	if c.firstErr == nil {
		c.firstErr = firstE
	}
	var all []rec
	opsBefore := c.ops
	defer func() { c.perRound = append(c.perRound, float64(c.ops-opsBefore)/dur.Seconds()) }()
	if c.perG == nil {
		c.perG = make([]int, c.goroutines)
	}
	for g, rs := range recs {
		c.perG[g] += len(rs)
		all = append(all, rs...)
	}
	if len(all) == 0 {
		return // a round without a completed hold still counts its time
	}
	c.ops += len(all)
	c.mallocs += m1.Mallocs - m0.Mallocs
	c.bytesSum += m1.TotalAlloc - m0.TotalAlloc
	c.cpuSum += cpu1 - cpu0
	if srvOK0 && srvOK1 {
		c.srvSum += srv1 - srv0
		c.srvRounds++
	}
	for _, r := range all {
		c.lat = append(c.lat, time.Duration(r.relDone-r.acqStart))
		c.wait = append(c.wait, time.Duration(r.acqDone-r.acqStart))
	}
	if c.contended && !c.sc.shared {
		slices.SortFunc(all, func(a, b rec) int { return int(a.acqDone - b.acqDone) })
		for i := 1; i < len(all); i++ {
			prev, cur := all[i-1], all[i]
			if cur.acqDone < prev.relStarted {
				c.overlaps++ // held before the previous holder even started releasing
			}
			// The database may grant the next waiter before the releaser has
			// read its own reply: such hand-offs count as zero.
			h := time.Duration(max(0, cur.acqDone-prev.relDone))
			c.handoff = append(c.handoff, h)
			if cur.g != prev.g {
				c.handoffX = append(c.handoffX, h)
			}
		}
		if all[0].token != 0 {
			c.fifo, c.fifoMax = queueOvertakes(all)
			c.fifoQueued = true
			return
		}
		// FIFO: an acquisition overtook a waiter that had started waiting
		// more than 2 ms before it and was still waiting.
		suffixMin := make([]int64, len(all)+1)
		suffixMin[len(all)] = int64(^uint64(0) >> 1)
		for i := len(all) - 1; i >= 0; i-- {
			suffixMin[i] = min(suffixMin[i+1], all[i].acqStart)
		}
		for i := range all {
			if m := all[i].acqStart - suffixMin[i+1]; m > int64(fifoSlack) {
				c.fifo++
				c.fifoMax = max(c.fifoMax, time.Duration(m))
			}
		}
	}
}

// queueOvertakes counts the grants, in the database's grant order (the
// tokens), that went to a waiter while another that had joined the queue
// earlier by the database's clock was still waiting: FIFO violations read
// from the queue itself, not from when the calls began. It returns the
// largest head start of an overtaken waiter.
func queueOvertakes(all []rec) (n int, worst time.Duration) {
	queued := slices.DeleteFunc(slices.Clone(all), func(r rec) bool { return r.joined == 0 })
	slices.SortFunc(queued, func(a, b rec) int { return cmp.Compare(a.token, b.token) })
	later := int64(math.MaxInt64) // earliest join among the grants after i
	for i := len(queued) - 1; i >= 0; i-- {
		if d := queued[i].joined - later; d > 0 {
			n++
			worst = max(worst, time.Duration(d)*time.Microsecond)
		}
		later = min(later, queued[i].joined)
	}
	return n, worst
}

// finish marks a cell that never completed a hold as failed.
func (c *cell) finish() {
	if c.skip != "" || c.err != nil || c.ops > 0 || c.rounds == 0 {
		return
	}
	if c.firstErr != nil {
		c.err = c.firstErr
	} else {
		c.err = errors.New("no acquisition completed")
	}
}

// ratioTo is the median over rounds of c's rate divided by base's rate in
// the same round: cells of one table run round-robin, so each round's pair
// was measured close together, and a slow spell of the shared machine moves
// one round's ratio, not the median.
func ratioTo(c, base *cell) float64 {
	if c == nil || base == nil || c.skip != "" || base.skip != "" || c.err != nil || base.err != nil {
		return 0
	}
	n := min(len(c.perRound), len(base.perRound))
	var rs []float64
	for i := range n {
		if base.perRound[i] > 0 {
			rs = append(rs, c.perRound[i]/base.perRound[i])
		}
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	if len(rs)%2 == 1 {
		return rs[len(rs)/2]
	}
	return (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func maxDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}
