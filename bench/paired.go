package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// Paired ratios. The bars that compare two scenarios at 1 goroutine are
// read from one goroutine that alternates between them, pairBatch
// acquire+release pairs at a time, so that both sides meet the same moments
// of a disk whose flush latency drifts from one second to the next. Read
// from the tables' rounds (one cell at a time, each round lasting
// duration/rounds), the read pair's ratio to the optimistic pair came out at
// 1.06× and 0.74× in two runs of the same code minutes apart.

// pairBatch is how many pairs one side runs before the other's turn.
const pairBatch = 20

// pairing names the two scenarios of a paired ratio: a ÷ b.
type pairing struct{ a, b string }

// pairings are the 1-goroutine comparisons that bars are read from.
var pairings = []pairing{
	{keyOptTry, keyFloor}, {keyOptAcquire, keyFloor},
	{keyOptTry, keyFloorAsync}, {keyOptAcquire, keyFloorAsync},
	{keyOptOtel, keyOptAcquire}, {keyOptHistory, keyOptAcquire},
	{keyPessimist, keyForUpdate}, {keyRead, keyOptAcquire},
}

// pairedCell is one measured pairing: the pairs, the time and the
// process's CPU (cpuTime) of each side. The CPU of a batch is the whole
// process's while the batch ran: the side's own work, its Locker's
// background work, and whatever else the process did meanwhile (a garbage
// collection may fall in either side's batch), so that drift in the
// kernel's cost of a round trip meets both sides alike.
type pairedCell struct {
	a, b           *scenario
	pairsA, pairsB int
	timeA, timeB   time.Duration
	cpuA, cpuB     time.Duration
	err            error
}

// ratio is a's pairs per second over b's.
func (p *pairedCell) ratio() float64 {
	if p.err != nil || p.pairsA == 0 || p.pairsB == 0 || p.timeA <= 0 || p.timeB <= 0 {
		return 0
	}
	return (float64(p.pairsA) / p.timeA.Seconds()) / (float64(p.pairsB) / p.timeB.Seconds())
}

// cpuRatio is a's client CPU per pair over b's.
func (p *pairedCell) cpuRatio() float64 {
	if p.err != nil || p.pairsA == 0 || p.pairsB == 0 || p.cpuA <= 0 || p.cpuB <= 0 {
		return 0
	}
	return (p.cpuA.Seconds() / float64(p.pairsA)) / (p.cpuB.Seconds() / float64(p.pairsB))
}

// pairedCPURatio is the client CPU ratio of the pairing a ÷ b measured in
// ps, if any.
func pairedCPURatio(ps []*pairedCell, a, b string) (float64, bool) {
	return pairedBy(ps, a, b, (*pairedCell).cpuRatio)
}

// pairedRatio is the ratio of the pairing a ÷ b measured in ps, if any.
func pairedRatio(ps []*pairedCell, a, b string) (float64, bool) {
	return pairedBy(ps, a, b, (*pairedCell).ratio)
}

// pairedBy is ratio (pairs a second, client CPU) of the pairing a ÷ b
// measured in ps, if any.
func pairedBy(ps []*pairedCell, a, b string, ratio func(*pairedCell) float64) (float64, bool) {
	for _, p := range ps {
		if p.a.key == a && p.b.key == b && p.err == nil {
			r := ratio(p)
			return r, r > 0
		}
	}
	return 0, false
}

// runPairings measures every pairing whose scenarios both run on e's
// database and are selected (only nil: all), for dur each.
func runPairings(ctx context.Context, e *env, dur time.Duration, only map[string]bool) []*pairedCell {
	var out []*pairedCell
	for _, pr := range pairings {
		a, b := registry[pr.a], registry[pr.b]
		if a == nil || b == nil || a.missing != "" || b.missing != "" || !a.runsOn(e.kind) || !b.runsOn(e.kind) {
			continue
		}
		if only != nil && (!only[pr.a] || !only[pr.b]) {
			continue
		}
		p := &pairedCell{a: a, b: b}
		p.run(ctx, e, dur)
		if rerr := e.reset(ctx, append(a.resetTables, b.resetTables...)...); rerr != nil && p.err == nil {
			p.err = rerr
		}
		fmt.Fprintf(os.Stderr, "bench: %s paired %s ÷ %s: %.3f× (%d + %d pairs)", e.label, pr.a, pr.b, p.ratio(), p.pairsA, p.pairsB)
		if p.err != nil {
			fmt.Fprintf(os.Stderr, " FAILED: %v", p.err)
		}
		fmt.Fprintln(os.Stderr)
		out = append(out, p)
	}
	return out
}

// pairSide is one side of a pairing while it runs.
type pairSide struct {
	inst *instance
	w    *worker
	name string
}

// run alternates the two sides for dur after a warm-up of two batches each.
func (p *pairedCell) run(ctx context.Context, e *env, dur time.Duration) {
	sides := [2]*pairSide{}
	for i, sc := range []*scenario{p.a, p.b} {
		s, err := openSide(ctx, e, sc)
		if err != nil {
			p.err = fmt.Errorf("%s: %w", sc.key, err)
			break
		}
		defer s.close()
		sides[i] = s
	}
	if p.err != nil {
		return
	}
	for range 2 {
		for _, s := range sides {
			if _, _, err := s.batch(ctx); err != nil {
				p.err = err
				return
			}
		}
	}
	end := time.Now().Add(dur)
	for turn := 0; time.Now().Before(end); turn++ {
		for k := range 2 {
			i := (turn + k) % 2 // Each side goes first every other turn.
			d, cpu, err := sides[i].batch(ctx)
			if err != nil {
				p.err = err
				return
			}
			if i == 0 {
				p.pairsA, p.timeA, p.cpuA = p.pairsA+pairBatch, p.timeA+d, p.cpuA+cpu
			} else {
				p.pairsB, p.timeB, p.cpuB = p.pairsB+pairBatch, p.timeB+d, p.cpuB+cpu
			}
		}
	}
}

// openSide sets up sc's instance and its one worker, on a name of its own.
func openSide(ctx context.Context, e *env, sc *scenario) (*pairSide, error) {
	inst, err := sc.setup(ctx, e, false)
	if err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	w, err := inst.worker(ctx, 0)
	if err != nil {
		inst.close()
		return nil, fmt.Errorf("worker: %w", err)
	}
	return &pairSide{inst: inst, w: w, name: fmt.Sprintf("%s/paired/%s", e.prefix, sc.key)}, nil
}

func (s *pairSide) close() {
	s.w.close()
	s.inst.close()
}

// batch runs pairBatch acquire+release pairs and returns their time and
// the process's CPU meanwhile.
func (s *pairSide) batch(ctx context.Context) (time.Duration, time.Duration, error) {
	start, cpu := time.Now(), cpuTime()
	for range pairBatch {
		release, err := s.w.acquire(ctx, s.name)
		if err != nil {
			return 0, 0, err
		}
		if err := release(ctx); err != nil {
			return 0, 0, err
		}
	}
	return time.Since(start), cpuTime() - cpu, nil
}

// printPaired prints the paired ratios.
func printPaired(w io.Writer, ps []*pairedCell) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(w, "### Paired at 1 goroutine: alternating %d pairs of each\n\n", pairBatch)
	fmt.Fprintln(w, "| scenario | vs | pairs/s | vs pairs/s | ratio | client CPU/pair | vs client CPU/pair | CPU ratio |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	for _, p := range ps {
		if p.err != nil {
			fmt.Fprintf(w, "| %s | %s | failed: %v | | | | | |\n", p.a.title, p.b.title, p.err)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.3f× | %s | %s | %.2f× |\n", p.a.title, p.b.title,
			float64(p.pairsA)/p.timeA.Seconds(), float64(p.pairsB)/p.timeB.Seconds(), p.ratio(),
			fmtDur(p.cpuA/time.Duration(p.pairsA)), fmtDur(p.cpuB/time.Duration(p.pairsB)), p.cpuRatio())
	}
	fmt.Fprintln(w)
}
