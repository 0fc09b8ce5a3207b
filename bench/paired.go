package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
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

// pairedWide is the number of goroutines of the optimistic wide pairings:
// the bars at 32 goroutines, each on a name of its own, read as the ones at
// 1 are (alternating, a slice of pairedSlice each), since one cell after the
// other swung from 0.75× to 1.11× between runs on MariaDB.
const pairedWide = 32

// pairedSlice is how long one side of a wide pairing runs before the
// other's turn.
const pairedSlice = 250 * time.Millisecond

// widePairings are the comparisons at many goroutines, each on a name of
// its own. Pessimistic Do ÷ FOR UPDATE at 8 and 32 is read so too: one cell
// after the other read 0.98× and 1.02× alone and 0.85× and 0.87× within a
// full run, where a checkpoint or an autovacuum of the earlier cells' rows
// falls in one cell and not the other.
//
// The bar "fair ÷ contended optimistic" is read so too, at pairedContended
// goroutines on one name a side (one: every goroutine of a side on the same
// name): one cell after the other, MariaDB's read 0.40–0.76× in runs of the
// same code minutes apart. So is fair ÷ the hand-written FIFO lock, its
// reference (no bar).
var widePairings = []pairing{
	{a: keyOptTry, b: keyFloor, n: pairedWide}, {a: keyOptAcquire, b: keyFloor, n: pairedWide},
	{a: keyPessimist, b: keyForUpdate, n: 8}, {a: keyPessimist, b: keyForUpdate, n: 32},
	{a: keyFair, b: keyOptAcquire, n: pairedContended, one: true},
	{a: keyFair, b: keyFIFO, n: pairedContended, one: true},
}

// pairedContended is the number of goroutines of the contended pairing,
// as in the contended table.
const pairedContended = 8

// pairing names the two scenarios of a paired ratio, a ÷ b, the goroutines
// of each side, and whether they all take one name (one) rather than a
// name each.
type pairing struct {
	a, b string
	n    int
	one  bool
}

// pairings are the 1-goroutine comparisons that bars are read from.
var pairings = []pairing{
	{a: keyOptTry, b: keyFloor, n: 1}, {a: keyOptAcquire, b: keyFloor, n: 1},
	{a: keyOptTry, b: keyFloorAsync, n: 1}, {a: keyOptAcquire, b: keyFloorAsync, n: 1},
	{a: keyOptOtel, b: keyOptAcquire, n: 1}, {a: keyOptHistory, b: keyOptAcquire, n: 1},
	{a: keyPessimist, b: keyForUpdate, n: 1}, {a: keyRead, b: keyOptAcquire, n: 1},
	{a: keyFair, b: keyOptAcquire, n: 1},
}

// pairedCell is one measured pairing: the pairs, the time and the
// process's CPU (cpuTime) of each side. The CPU of a batch is the whole
// process's while the batch ran: the side's own work, its Locker's
// background work, and whatever else the process did meanwhile (a garbage
// collection may fall in either side's batch), so that drift in the
// kernel's cost of a round trip meets both sides alike.
type pairedCell struct {
	a, b           *scenario
	n              int  // Goroutines a side.
	one            bool // All of a side's goroutines on one name.
	pairsA, pairsB int
	timeA, timeB   time.Duration
	cpuA, cpuB     time.Duration
	err            error
}

// width is the goroutines of a side, as the table prints them.
func (p *pairedCell) width() string {
	if p.one {
		return fmt.Sprintf("%d, one name", p.n)
	}
	return fmt.Sprint(p.n)
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

// pairedCPURatio is the client CPU ratio of the pairing a ÷ b at 1
// goroutine measured in ps, if any.
func pairedCPURatio(ps []*pairedCell, a, b string) (float64, bool) {
	return pairedBy(ps, pairing{a: a, b: b, n: 1}, (*pairedCell).cpuRatio)
}

// pairedBy is ratio (pairs a second, client CPU) of the pairing pr measured
// in ps, if any.
func pairedBy(ps []*pairedCell, pr pairing, ratio func(*pairedCell) float64) (float64, bool) {
	for _, p := range ps {
		if p.n == pr.n && p.one == pr.one && p.a.key == pr.a && p.b.key == pr.b && p.err == nil {
			r := ratio(p)
			return r, r > 0
		}
	}
	return 0, false
}

// runPairings measures every pairing whose scenarios both run on e's
// database and are selected (only nil: all), for dur each: those at 1
// goroutine, then the wide ones.
func runPairings(ctx context.Context, e *env, dur time.Duration, only map[string]bool) []*pairedCell {
	var out []*pairedCell
	for _, pr := range append(slices.Clone(pairings), widePairings...) {
		if p := runPairing(ctx, e, pr, dur, only); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// runPairing measures one pairing, or returns nil when it does not run on
// e or is not selected.
func runPairing(ctx context.Context, e *env, pr pairing, dur time.Duration, only map[string]bool) *pairedCell {
	a, b := registry[pr.a], registry[pr.b]
	if a == nil || b == nil || a.missing != "" || b.missing != "" || !a.runsOn(e.kind) || !b.runsOn(e.kind) {
		return nil
	}
	if only != nil && (!only[pr.a] || !only[pr.b]) {
		return nil
	}
	p := &pairedCell{a: a, b: b, n: pr.n, one: pr.one}
	p.run(ctx, e, dur)
	if rerr := e.reset(ctx, append(a.resetTables, b.resetTables...)...); rerr != nil && p.err == nil {
		p.err = rerr
	}
	fmt.Fprintf(os.Stderr, "bench: %s paired at %s %s ÷ %s: %.3f× (%d + %d pairs)", e.label, p.width(), pr.a, pr.b, p.ratio(), p.pairsA, p.pairsB)
	if p.err != nil {
		fmt.Fprintf(os.Stderr, " FAILED: %v", p.err)
	}
	fmt.Fprintln(os.Stderr)
	return p
}

// pairSide is one side of a pairing while it runs.
type pairSide struct {
	inst  *instance
	ws    []*worker
	names []string
}

// run alternates the two sides for dur after a warm-up of two turns each.
func (p *pairedCell) run(ctx context.Context, e *env, dur time.Duration) {
	sides := [2]*pairSide{}
	for i, sc := range []*scenario{p.a, p.b} {
		s, err := openSide(ctx, e, sc, p.n, p.one)
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
			if _, _, _, err := s.turn(ctx); err != nil {
				p.err = err
				return
			}
		}
	}
	end := time.Now().Add(dur)
	for turn := 0; time.Now().Before(end); turn++ {
		for k := range 2 {
			i := (turn + k) % 2 // Each side goes first every other turn.
			pairs, d, cpu, err := sides[i].turn(ctx)
			if err != nil {
				p.err = err
				return
			}
			if i == 0 {
				p.pairsA, p.timeA, p.cpuA = p.pairsA+pairs, p.timeA+d, p.cpuA+cpu
			} else {
				p.pairsB, p.timeB, p.cpuB = p.pairsB+pairs, p.timeB+d, p.cpuB+cpu
			}
		}
	}
}

// openSide sets up sc's instance and n workers, each on a name of its own
// (one: all on one name).
func openSide(ctx context.Context, e *env, sc *scenario, n int, one bool) (*pairSide, error) {
	inst, err := sc.setup(ctx, e, false)
	if err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	s := &pairSide{inst: inst}
	for g := range n {
		w, err := inst.worker(ctx, g)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("worker %d: %w", g, err)
		}
		s.ws = append(s.ws, w)
		name := fmt.Sprintf("%s/paired%d/%s/%d", e.prefix, n, sc.key, g)
		if one {
			name = fmt.Sprintf("%s/paired%d/%s/one", e.prefix, n, sc.key)
		}
		s.names = append(s.names, name)
	}
	return s, nil
}

func (s *pairSide) close() {
	for _, w := range s.ws {
		w.close()
	}
	s.inst.close()
}

// turn is one side's turn: pairBatch pairs on one worker, or on many
// workers at once pairs until pairedSlice has passed. It returns the
// pairs, their time and the process's CPU meanwhile.
func (s *pairSide) turn(ctx context.Context) (int, time.Duration, time.Duration, error) {
	start, cpu := time.Now(), cpuTime()
	if len(s.ws) == 1 {
		n, err := s.pairs(ctx, 0, pairBatch, time.Time{})
		return n, time.Since(start), cpuTime() - cpu, err
	}
	end := start.Add(pairedSlice)
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		errs  = make([]error, len(s.ws))
	)
	for g := range s.ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := s.pairs(ctx, g, 0, end)
			total.Add(int64(n))
			errs[g] = err
		}()
	}
	wg.Wait()
	return int(total.Load()), time.Since(start), cpuTime() - cpu, errors.Join(errs...)
}

// pairs runs acquire+release pairs on worker g: limit of them (limit > 0),
// or until end has passed. It returns how many it ran.
func (s *pairSide) pairs(ctx context.Context, g, limit int, end time.Time) (int, error) {
	n := 0
	for (limit <= 0 || n < limit) && (end.IsZero() || time.Now().Before(end)) {
		release, err := s.ws[g].acquire(ctx, s.names[g])
		if err != nil {
			return n, err
		}
		if err := release(ctx); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// printPaired prints the paired ratios.
func printPaired(w io.Writer, ps []*pairedCell) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(w, "### Paired: alternating turns (1 goroutine: %d pairs each; more, a name each or \"one name\": %s each)\n\n",
		pairBatch, fmtDur(pairedSlice))
	fmt.Fprintln(w, "| scenario | vs | goroutines | pairs/s | vs pairs/s | ratio | client CPU/pair | vs client CPU/pair | CPU ratio |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range ps {
		if p.err != nil {
			fmt.Fprintf(w, "| %s | %s | %s | failed: %v | | | | | |\n", p.a.title, p.b.title, p.width(), p.err)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.0f | %.0f | %.3f× | %s | %s | %.2f× |\n", p.a.title, p.b.title, p.width(),
			float64(p.pairsA)/p.timeA.Seconds(), float64(p.pairsB)/p.timeB.Seconds(), p.ratio(),
			fmtDur(p.cpuA/time.Duration(p.pairsA)), fmtDur(p.cpuB/time.Duration(p.pairsB)), p.cpuRatio())
	}
	fmt.Fprintln(w)
}
