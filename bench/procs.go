package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/optimistic"
)

// Fairness across processes: the same contention as the contended cell (8
// goroutines on one name, optimistic Acquire with defaults), spread over
// procCount OS processes of procGoroutines goroutines each, which only the
// database connects. Each process is this binary re-executed as a child
// (envChild set), which runs its goroutines from a shared wall-clock start
// for the cell's duration and prints its counts and waits as JSON.

const (
	procCount      = 4
	procGoroutines = 2
	envChild       = "DBLOCK_BENCH_CHILD" // the child's JSON job
)

// childJob is a child's task.
type childJob struct {
	DSN        string        `json:"dsn"`
	PgURL      string        `json:"pg_url,omitempty"` // PostgreSQL's, for the hand-written reference's LISTEN
	Name       string        `json:"name"`
	Goroutines int           `json:"goroutines"`
	Start      time.Time     `json:"start"` // wall clock: the children measure from it together
	Duration   time.Duration `json:"duration"`
	// Warm is how long the children run before Start, uncounted, as every
	// in-process cell does: new sessions plan their statements and fill
	// their caches there.
	Warm time.Duration `json:"warm"`
	// Fair runs fairqueue's Locker instead of optimistic's.
	Fair bool `json:"fair,omitempty"`
	// Handoff runs the hand-written reference (handoff.go) instead of
	// dblock: this child's members are Index*Goroutines on, of Members.
	Handoff bool `json:"handoff,omitempty"`
	Index   int  `json:"index,omitempty"`
	Members int  `json:"members,omitempty"`
}

// begin is when the children start: Warm before Start.
func (j childJob) begin() time.Time { return j.Start.Add(-j.Warm) }

// measured reports whether an acquisition begun at t0 counts (from Start).
func (j childJob) measured(t0 time.Time) bool { return !t0.Before(j.Start) }

// childResult is what a child prints.
type childResult struct {
	Counts []int           `json:"counts"` // acquisitions per goroutine
	Waits  []time.Duration `json:"waits"`  // every acquire's wait
	Err    string          `json:"err,omitempty"`
}

// procCell is the measured cross-process cell.
type procCell struct {
	skip     string
	err      error
	ops      int
	elapsed  time.Duration
	perProc  []int
	perG     []int
	wait     []time.Duration
	firstErr string
}

func (c *procCell) opsPerSec() float64 {
	if c.elapsed <= 0 {
		return 0
	}
	return float64(c.ops) / c.elapsed.Seconds()
}

// childMain is the body of a child process; it returns the exit code.
func childMain(job string) int {
	var j childJob
	if err := json.Unmarshal([]byte(job), &j); err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 2
	}
	run := runChild
	if j.Handoff {
		run = runHandoffChild
	}
	res := run(j)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

// childLocker is what a child acquires with: optimistic's Locker, or
// fairqueue's (childJob.Fair).
type childLocker interface {
	Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error)
	Close() error
}

// newChildLocker makes j's Locker on db.
func newChildLocker(db *dialect.DB, j childJob) (childLocker, error) {
	if j.Fair {
		return fairqueue.New(db, nil)
	}
	return optimistic.New(db, nil)
}

// runChild runs j's goroutines on one Locker of its own.
func runChild(j childJob) childResult {
	ctx := context.Background()
	db, err := dialect.Open(ctx, j.DSN)
	if err != nil {
		return childResult{Err: err.Error()}
	}
	defer db.Close()
	l, err := newChildLocker(db, j)
	if err != nil {
		return childResult{Err: err.Error()}
	}
	defer l.Close()
	time.Sleep(time.Until(j.begin()))
	end := j.Start.Add(j.Duration)
	var (
		mu  sync.Mutex
		res = childResult{Counts: make([]int, j.Goroutines)}
		wg  sync.WaitGroup
	)
	for g := range j.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				t0 := time.Now()
				lease, err := l.Acquire(ctx, j.Name)
				if err != nil {
					mu.Lock()
					res.Err = err.Error()
					mu.Unlock()
					return
				}
				waited := time.Since(t0)
				if err := lease.Release(ctx); err != nil {
					mu.Lock()
					res.Err = err.Error()
					mu.Unlock()
					return
				}
				if !j.measured(t0) {
					continue
				}
				mu.Lock()
				res.Counts[g]++
				res.Waits = append(res.Waits, waited)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res
}

// procKind is what a cross-process cell runs.
type procKind int

const (
	procOptimistic procKind = iota // optimistic Acquire+Release
	procFair                       // fairqueue Acquire+Release
	procHandoff                    // the hand-written hand-off
)

// runProcCell runs a cross-process cell of kind on e for dur (after warm).
func runProcCell(ctx context.Context, e *env, name string, kind procKind, warm, dur time.Duration) *procCell {
	handoff := kind == procHandoff
	self, err := os.Executable()
	if err != nil {
		return &procCell{err: err}
	}
	if handoff {
		if err := handoffRow(ctx, e, name); err != nil {
			return &procCell{err: err}
		}
	}
	base := childJob{DSN: e.dsn, PgURL: e.pgURL, Name: name, Goroutines: procGoroutines,
		Start: time.Now().Add(2*time.Second + warm), Duration: dur, Warm: warm, Handoff: handoff, Fair: kind == procFair,
		Members: procCount * procGoroutines}
	outs := make([][]byte, procCount)
	errs := make([]error, procCount)
	var wg sync.WaitGroup
	for i := range procCount {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := base
			j.Index = i
			job, _ := json.Marshal(j)
			cmd := exec.CommandContext(ctx, self)
			cmd.Env = append(os.Environ(), envChild+"="+string(job))
			cmd.Stderr = io.Discard
			outs[i], errs[i] = cmd.Output()
		}()
	}
	wg.Wait()
	c := &procCell{elapsed: dur}
	for i := range procCount {
		var r childResult
		if err := errors.Join(errs[i], json.Unmarshal(outs[i], &r)); err != nil {
			return &procCell{err: fmt.Errorf("child %d: %w", i, err)}
		}
		if r.Err != "" && c.firstErr == "" {
			c.firstErr = r.Err
		}
		total := 0
		for _, n := range r.Counts {
			total += n
		}
		c.perProc = append(c.perProc, total)
		c.perG = append(c.perG, r.Counts...)
		c.wait = append(c.wait, r.Waits...)
		c.ops += total
	}
	slices.Sort(c.wait)
	return c
}

// printProcs prints the cross-process table and its bars against the
// in-process contended cell of the same scenario (inProc) and against the
// hand-written hand-off across the same processes (handoff).
func printProcs(w io.Writer, c, fair, handoff *procCell, inProc *cell) {
	fmt.Fprintf(w, "### Across processes: %d OS processes × %d goroutines on one name, %d turns each, the rows taking turns (Acquire+Release, defaults; the bars read dblock optimistic)\n\n", procCount, procGoroutines, procRounds)
	switch {
	case c == nil || c.skip != "":
		fmt.Fprintln(w, "not run")
		fmt.Fprintln(w)
		return
	case c.err != nil:
		fmt.Fprintf(w, "failed: %v\n\n", c.err)
		return
	}
	fmt.Fprintln(w, "| scenario | acquisitions/s | ÷ in-process contended | ÷ hand-written hand-off | per process min..max (ratio) | per goroutine min..max (ratio) | wait p50 | wait p99 | wait max |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	ref := handoff
	if ref != nil && ref.err != nil {
		ref = nil // Its failure is printed in its row.
	}
	ratio, refRatio := procRow(w, "dblock optimistic", c, inProc, ref)
	extraProcRow(w, "dblock fair (fairqueue)", fair, inProc, ref)
	extraProcRow(w, "hand-written hand-off (members take turns)", handoff, inProc, ref)
	fmt.Fprintln(w)
	pLo, pHi := minMax(c.perProc)
	gLo, gHi := minMax(c.perG)
	have := c.ops > 0 && usable(inProc)
	fmt.Fprintln(w, verdict(have, ratioOf(pLo, pHi) >= 0.8 && ratioOf(gLo, gHi) >= 0.8, "fairness across processes",
		fmt.Sprintf("across processes: min/max %.2f per process, %.2f per goroutine (bar ≥ 0.8)", ratioOf(pLo, pHi), ratioOf(gLo, gHi))))
	fmt.Fprintln(w, verdict(have, ratio >= 0.9, "throughput across processes",
		fmt.Sprintf("across processes: %.3f× the in-process contended acquisitions/s (bar ≥ 0.9×)", ratio)))
	fmt.Fprintln(w, verdict(c.ops > 0 && refRatio > 0, refRatio >= 0.95, "throughput across processes ÷ hand-written",
		fmt.Sprintf("across processes: %.3f× the hand-written hand-off across the same processes (the issue's fallback bar where 0.9× the in-process rate is out of reach: ≥ 0.95×)", refRatio)))
	fmt.Fprintln(w)
}

// extraProcRow prints a row beside dblock optimistic's, or says why not.
func extraProcRow(w io.Writer, label string, c *procCell, inProc *cell, ref *procCell) {
	switch {
	case c == nil:
	case c.err != nil:
		fmt.Fprintf(w, "| %s | failed: %v |\n", label, c.err)
	default:
		procRow(w, label, c, inProc, ref)
	}
}

// procRow prints one cross-process row; it returns the rate ÷ inProc's
// and ÷ ref's (zero where either is missing).
func procRow(w io.Writer, label string, c *procCell, inProc *cell, ref *procCell) (ratio, refRatio float64) {
	pLo, pHi := minMax(c.perProc)
	gLo, gHi := minMax(c.perG)
	errNote := ""
	if c.firstErr != "" {
		errNote = " (error: " + firstLine(c.firstErr) + ")"
	}
	if usable(inProc) {
		ratio = c.opsPerSec() / inProc.opsPerSec()
	}
	if ref != nil {
		refRatio = ratioOf(c.ops, ref.ops)
	}
	fmt.Fprintf(w, "| %s | %.0f%s | %s | %s | %d..%d (%.2f) | %d..%d (%.2f) | %s | %s | %s |\n", label, c.opsPerSec(), errNote,
		fmtRatio(ratio), fmtRatio(refRatio), pLo, pHi, ratioOf(pLo, pHi), gLo, gHi, ratioOf(gLo, gHi),
		fmtDur(pct(c.wait, .5)), fmtDur(pct(c.wait, .99)), fmtDur(maxDur(c.wait)))
	return ratio, refRatio
}

// ratioOf is lo/hi, 0 when hi is 0.
func ratioOf(lo, hi int) float64 {
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

// procRounds is how many turns each cross-process cell runs, the kinds
// taking turns (dblock, the hand-written hand-off, dblock, ...), so that
// the ratio between them reads the same disk and server: a flush that
// slows for a while slows both alike.
const procRounds = 3

// runProcRounds runs the cross-process cells of kinds on e in procRounds
// alternating turns, each a share of dur, and sums each kind's turns.
func runProcRounds(ctx context.Context, e *env, kinds []procKind, warm, dur time.Duration) map[procKind]*procCell {
	cells := make(map[procKind]*procCell, len(kinds))
	for range procRounds {
		for _, k := range kinds {
			cells[k] = cells[k].add(runProcs(ctx, e, k, warm, dur/procRounds))
		}
	}
	for _, c := range cells {
		slices.Sort(c.wait)
	}
	return cells
}

// add is c with turn's counts added (turn itself when c is nil); a
// failed turn fails the cell.
func (c *procCell) add(turn *procCell) *procCell {
	if c == nil || turn.err != nil {
		return turn
	}
	if c.err != nil {
		return c
	}
	c.ops += turn.ops
	c.elapsed += turn.elapsed
	addCounts(c.perProc, turn.perProc)
	addCounts(c.perG, turn.perG)
	c.wait = append(c.wait, turn.wait...)
	if c.firstErr == "" {
		c.firstErr = turn.firstErr
	}
	return c
}

// addCounts adds b into a, element by element (both of one cell's shape).
func addCounts(a, b []int) {
	for i := range min(len(a), len(b)) {
		a[i] += b[i]
	}
}

// runProcs runs one turn of the cross-process cell of kind on e, then
// empties the tables.
func runProcs(ctx context.Context, e *env, kind procKind, warm, dur time.Duration) *procCell {
	label := [...]string{"", ", fairqueue", ", hand-written hand-off"}[kind]
	fmt.Fprintf(os.Stderr, "bench: %s %d processes x %d goroutines on one name%s\n", e.label, procCount, procGoroutines, label)
	c := runProcCell(ctx, e, procName(e)+"/"+strconv.Itoa(int(kind)), kind, warm, dur)
	if err := e.reset(ctx); err != nil && c.err == nil {
		c.err = err
	}
	return c
}

// procName is the cross-process cells' lock name prefix.
func procName(e *env) string { return e.prefix + "/procs/" + strconv.Itoa(procCount) }
