package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// manyNames is the size of the names check (1 vs manyNames distinct names).
const manyNames = 100_000

// namesCheck builds the floor and optimistic TryAcquire cells at one
// goroutine, cycling over one name and over manyNames pre-inserted free rows
// in a random order, to show whether cost per acquire+release grows with the
// number of names.
func namesCheck(e *env, newCell func(*scenario, int) *cell, only map[string]bool) []*cell {
	var cells []*cell
	many := make([]string, manyNames)
	for i := range many {
		many[i] = fmt.Sprintf("%s/n/%d", e.prefix, i)
	}
	rand.Shuffle(len(many), func(i, j int) { many[i], many[j] = many[j], many[i] })
	one := e.prefix + "/n/one"
	populated := false // the rows are shared by both scenarios and kept between rounds
	for _, key := range []string{keyFloor, keyOptTry} {
		sc := registry[key]
		if sc == nil || (only != nil && !only[key]) {
			continue
		}
		c1 := newCell(sc, 1)
		c1.names = 1
		c1.nameOf = func(int, int) string { return one }
		c1.keepRows = true
		cN := newCell(sc, 1)
		cN.names = manyNames
		// Each round starts at a new place in the shuffled names.
		var offset int
		cN.before = func(ctx context.Context) error {
			offset += len(many) / 7
			if populated {
				return nil
			}
			populated = true
			return populate(ctx, e, many)
		}
		cN.nameOf = func(_, i int) string { return many[(offset+i)%len(many)] }
		cN.keepRows = true
		cells = append(cells, c1, cN)
	}
	return cells
}

// populate inserts a free row for every name.
func populate(ctx context.Context, e *env, names []string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	const batch = 1000
	for i := 0; i < len(names); i += batch {
		chunk := names[i:min(i+batch, len(names))]
		var sb strings.Builder
		args := make([]any, 0, len(chunk))
		if e.kind == store.Postgres {
			sb.WriteString("INSERT INTO dblock_locks (name, reentry, version, updated_at) SELECT n, 0, 1, now() FROM unnest($1::text[]) AS n")
			if _, err := e.db.SQL().ExecContext(ctx, sb.String(), chunk); err != nil {
				return err
			}
			continue
		}
		sb.WriteString("INSERT INTO dblock_locks (name, reentry, version, updated_at) VALUES ")
		for j, n := range chunk {
			if j > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, 0, 1, UTC_TIMESTAMP(6))")
			args = append(args, n)
		}
		if _, err := e.db.SQL().ExecContext(ctx, sb.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func fmtRatio(r float64) string {
	if r <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

func fmtSize(b float64) string {
	if b >= 10*1024 {
		return fmt.Sprintf("%.1f KiB", b/1024)
	}
	return fmt.Sprintf("%.0f", b)
}

// status is what a cell prints instead of figures, or "".
func status(c *cell) string {
	switch {
	case c.skip != "":
		return "not available (" + c.skip + ")"
	case c.err != nil:
		return "failed: " + strings.ReplaceAll(firstLine(c.err.Error()), "|", "/")
	}
	return ""
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

func find(cells []*cell, key string, goroutines int) *cell {
	for _, c := range cells {
		if c.sc.key == key && c.goroutines == goroutines {
			return c
		}
	}
	return nil
}

func errNote(c *cell) string {
	if c.errs == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d errors: %s)", c.errs, strings.ReplaceAll(firstLine(fmt.Sprint(c.firstErr)), "|", "/"))
}

func printUncontended(w io.Writer, cells []*cell) {
	fmt.Fprintln(w, "### Uncontended: each goroutine on its own name")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | goroutines | ops/s | p50 | p99 | ÷ floor | ÷ FOR UPDATE floor | allocs/op | B/op | client CPU/op | server CPU/op |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		if s := status(c); s != "" {
			fmt.Fprintf(w, "| %s | %d | %s | | | | | | | | |\n", c.sc.title, c.goroutines, s)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %.0f%s | %s | %s | %s | %s | %.0f | %s | %s | %s |\n",
			c.sc.title, c.goroutines, c.opsPerSec(), errNote(c), fmtDur(pct(c.lat, .5)), fmtDur(pct(c.lat, .99)),
			fmtRatio(ratioTo(c, find(cells, keyFloor, c.goroutines))),
			fmtRatio(ratioTo(c, find(cells, keyForUpdate, c.goroutines))),
			c.allocs(), fmtSize(c.bytes()), fmtDur(c.cpu()), fmtServerCPU(c.serverCPU()))
	}
	fmt.Fprintln(w)
}

// fmtServerCPU is a server CPU figure, "–" where none was read.
func fmtServerCPU(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return fmtDur(d)
}

func minMax(perG []int) (int, int) {
	if len(perG) == 0 {
		return 0, 0
	}
	return slices.Min(perG), slices.Max(perG)
}

func fairness(c *cell) float64 {
	lo, hi := minMax(c.perG)
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

func printContended(w io.Writer, cells []*cell) {
	fmt.Fprintln(w, "### Contended: 8 goroutines on one name")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | acquisitions/s | ÷ floor | hand-off p50 | hand-off p99 | to another goroutine: share, p50 | wait p50 | wait p99 | wait max | per goroutine min..max (ratio) | FIFO overtakes |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var floor *cell
	for _, c := range cells {
		if c.sc.key == keyFloor {
			floor = c
		}
	}
	for _, c := range cells {
		if s := status(c); s != "" {
			fmt.Fprintf(w, "| %s | %s | | | | | | | | | |\n", c.sc.title, s)
			continue
		}
		lo, hi := minMax(c.perG)
		other := "–"
		if len(c.handoff) > 0 {
			other = fmt.Sprintf("%.0f %%, %s", 100*float64(len(c.handoffX))/float64(len(c.handoff)), fmtDur(pct(c.handoffX, .5)))
		}
		over := ""
		if c.overlaps > 0 {
			over = fmt.Sprintf(" **%d overlapping holds**", c.overlaps)
		}
		overtakes := "0"
		if c.fifo > 0 {
			overtakes = fmt.Sprintf("%d (≤ %s)", c.fifo, fmtDur(c.fifoMax))
		}
		fmt.Fprintf(w, "| %s | %.0f%s%s | %s | %s | %s | %s | %s | %s | %s | %d..%d (%.2f) | %s |\n",
			c.sc.title, c.opsPerSec(), errNote(c), over, fmtRatio(ratioTo(c, floor)),
			fmtDur(pct(c.handoff, .5)), fmtDur(pct(c.handoff, .99)), other,
			fmtDur(pct(c.wait, .5)), fmtDur(pct(c.wait, .99)), fmtDur(maxDur(c.wait)),
			lo, hi, fairness(c), overtakes)
	}
	fmt.Fprintln(w)
}

func findNames(cells []*cell, key string, names int) *cell {
	for _, c := range cells {
		if c.sc.key == key && c.names == names {
			return c
		}
	}
	return nil
}

func printNames(w io.Writer, cells []*cell) {
	if len(cells) == 0 {
		return
	}
	fmt.Fprintf(w, "### Distinct names: 1 goroutine cycling over 1 name vs %d names (rows pre-inserted, random order)\n\n", manyNames)
	fmt.Fprintln(w, "| scenario | names | ops/s | p50 | p99 | allocs/op | B/op | client CPU/op | ÷ 1 name (ops/s) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		if s := status(c); s != "" {
			fmt.Fprintf(w, "| %s | %d | %s | | | | | | |\n", c.sc.title, c.names, s)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %.0f%s | %s | %s | %.0f | %s | %s | %s |\n",
			c.sc.title, c.names, c.opsPerSec(), errNote(c), fmtDur(pct(c.lat, .5)), fmtDur(pct(c.lat, .99)),
			c.allocs(), fmtSize(c.bytes()), fmtDur(c.cpu()),
			fmtRatio(ratioTo(c, findNames(cells, c.sc.key, 1))))
	}
	fmt.Fprintln(w)
}

// verdict formats one bar: met when ok, else not met; n/a without figures.
// text is printed only with figures; label names the bar either way.
func verdict(have, ok bool, label, text string) string {
	switch {
	case !have:
		return "- n/a — " + label + ": not measured in this run"
	case ok:
		return "- **met** — " + text
	}
	return "- **not met** — " + text
}

func usable(c *cell) bool { return c != nil && c.skip == "" && c.err == nil && c.ops > 0 }

// printBars checks this run's figures against the product bars of DESIGN.md
// and issue 8. The bars are goals, not test assertions.
func printBars(w io.Writer, e *env, un, co []*cell, names []*cell, ps []*pairedCell) {
	fmt.Fprintf(w, "### Bars (%s, this run)\n\n", e.label)
	pg := e.kind == store.Postgres
	want := 0.9
	if pg {
		want = 1.5
	}
	for _, key := range []string{keyOptTry, keyOptAcquire} {
		title := registry[key].title
		barAt1(w, ps, un, key, keyFloor, want, title+" vs the floor", title+", 1 goroutine: %.3f× the two-statement floor (bar ≥ "+fmt.Sprintf("%.1f", want)+"×)")
		if pg {
			barAt1(w, ps, un, key, keyFloorAsync, 0.95, title+" vs the best hand-written lease",
				"same, vs the best hand-written lease (release committed asynchronously): %.3f× (the fallback bar where 1.5× the floor is out of reach: ≥ 0.95×)")
			barVs(w, find(un, key, 1), find(un, keyPglock, 1), 1.5, title+" vs cirello.io/pglock", "same, vs cirello.io/pglock: %.3f× (bar: well ahead; read as ≥ 1.5×)")
		}
	}

	barAt1(w, ps, un, keyOptOtel, keyOptAcquire, 0.95, "optimistic with an OpenTelemetry SDK vs without",
		"optimistic Acquire+Release with an SDK recording every metric and span, 1 goroutine: %.3f× without (bar ≥ 0.95×)")
	if pg {
		barAt1(w, ps, un, keyOptHistory, keyOptAcquire, 0.8, "optimistic with history vs without",
			"optimistic Acquire+Release with the history enabled, 1 goroutine: %.3f× without (bar ≥ 0.8×)")
	}

	barAt1(w, ps, un, keyPessimist, keyForUpdate, 0.9, "pessimistic Do vs FOR UPDATE at 1",
		"pessimistic Do, 1 goroutine(s): %.3f× hand-written FOR UPDATE (bar ≥ 0.9×)")
	for _, n := range []int{8, 32} {
		barPaired(w, ps, pairing{a: keyPessimist, b: keyForUpdate, n: n}, find(un, keyPessimist, n), find(un, keyForUpdate, n), 0.9,
			fmt.Sprintf("pessimistic Do vs FOR UPDATE at %d", n),
			fmt.Sprintf("pessimistic Do, %d goroutine(s): %%.3f× hand-written FOR UPDATE (bar ≥ 0.9×)", n))
	}
	for _, key := range []string{keyOptTry, keyOptAcquire} {
		barPaired(w, ps, pairing{a: key, b: keyFloor, n: pairedWide}, find(un, key, pairedWide), find(un, keyFloor, pairedWide), 1.0,
			registry[key].title+" at 32 goroutines vs the floor",
			fmt.Sprintf("%s, 32 goroutines: %%.3f× the floor's throughput (bar ≥ 1.0×)", registry[key].title))
	}
	var cfloor, copt, cfair *cell
	for _, c := range co {
		switch c.sc.key {
		case keyFloor:
			cfloor = c
		case keyOptAcquire:
			copt = c
		case keyFair:
			cfair = c
		}
	}
	if pg {
		have := usable(copt) && usable(cfloor)
		r := 0.0
		if have {
			r = ratioTo(copt, cfloor)
		}
		fmt.Fprintln(w, verdict(have, r >= 1.0, "contended optimistic Acquire vs the floor", fmt.Sprintf("contended optimistic Acquire: %.3f× the floor's acquisitions/s (bar ≥ 1.0×)", r)))
		if usable(copt) {
			fmt.Fprintln(w, verdict(true, pct(copt.wait, .99) < 10*time.Millisecond, "",
				fmt.Sprintf("contended optimistic: acquire-wait p99 %s (bar < 10 ms)", fmtDur(pct(copt.wait, .99)))))
			fmt.Fprintln(w, verdict(true, fairness(copt) >= 0.5, "",
				fmt.Sprintf("contended optimistic: per-goroutine min/max %.2f (bar ≥ 0.5)", fairness(copt))))
			fmt.Fprintln(w, verdict(true, pct(copt.handoff, .5) < 2*time.Millisecond, "",
				fmt.Sprintf("contended optimistic: hand-off median %s, %s to another goroutine (bar < 2 ms with NOTIFY)",
					fmtDur(pct(copt.handoff, .5)), fmtDur(pct(copt.handoffX, .5)))))
		} else {
			fmt.Fprintln(w, verdict(false, false, "contended optimistic: wait p99 < 10 ms, min/max ≥ 0.5, hand-off median < 2 ms", ""))
		}
	}
	if usable(cfair) {
		fmt.Fprintln(w, verdict(true, fairness(cfair) >= 0.9, "",
			fmt.Sprintf("fair: per-goroutine min/max %.2f (bar ≥ 0.9)", fairness(cfair))))
		fifo := "fair: %d acquisitions overtook a waiter that called Acquire more than 2 ms earlier (largest head start %s; bar: zero FIFO violations — the client sees call order, not queue order)"
		if cfair.fifoQueued {
			fifo = "fair: %d grants (in token order) went to a waiter while one that joined the queue earlier still waited (largest head start %s, by the database clock; bar: zero FIFO violations)"
		}
		fmt.Fprintln(w, verdict(true, cfair.fifo == 0, "", fmt.Sprintf(fifo, cfair.fifo, fmtDur(cfair.fifoMax))))
		barPaired(w, ps, pairing{a: keyFair, b: keyOptAcquire, n: pairedContended, one: true}, cfair, copt, 0.5,
			"fair vs contended optimistic", "fair: %.3f× contended optimistic acquisitions/s (bar ≥ 0.5×)")
		if r, ok := pairedBy(ps, pairing{a: keyFair, b: keyFIFO, n: pairedContended, one: true}, (*pairedCell).ratio); ok {
			fmt.Fprintf(w, "- (no bar) — fair: %.3f× the hand-written FIFO lock's acquisitions/s, contended (paired)\n", r)
		}
	} else {
		fmt.Fprintln(w, verdict(false, false, "fair: min/max ≥ 0.9, zero FIFO violations, ≥ 0.5× optimistic rate", ""))
	}
	printCostBars(w, un, ps)
	o1, oN := findNames(names, keyOptTry, 1), findNames(names, keyOptTry, manyNames)
	if usable(o1) && usable(oN) {
		ra, rc := oN.allocs()/o1.allocs(), float64(oN.cpu())/float64(o1.cpu())
		fmt.Fprintln(w, verdict(true, ra <= 1.1 && rc <= 1.25, "",
			fmt.Sprintf("optimistic at %d names vs 1: allocs/op %.2f×, client CPU/op %.2f× (bar: no growth; read as ≤ 1.1× allocs, ≤ 1.25× CPU given noise)",
				manyNames, ra, rc)))
	} else {
		fmt.Fprintln(w, verdict(false, false, fmt.Sprintf("optimistic allocs and CPU per op do not grow from 1 to %d names", manyNames), ""))
	}
	fmt.Fprintln(w)
}

// printCostBars prints the bars read from the uncontended cells at 1
// goroutine: fair against optimistic, and what an optimistic pair costs the
// client (allocations; CPU against the floor's, from the paired
// measurement when the run has it).
func printCostBars(w io.Writer, un []*cell, ps []*pairedCell) {
	barAt1(w, ps, un, keyFair, keyOptAcquire, 0.7, "fair vs optimistic at 1 goroutine",
		"fair Acquire+Release, 1 goroutine: %.3f× optimistic Acquire+Release (bar ≥ 0.7×)")
	floor := find(un, keyFloor, 1)
	for _, key := range []string{keyOptTry, keyOptAcquire} {
		c := find(un, key, 1)
		title := registry[key].title
		if !usable(c) || !usable(floor) {
			fmt.Fprintln(w, verdict(false, false, title+": allocations ≤ 60 and client CPU ≤ 1.1× the floor's per pair", ""))
			continue
		}
		rc, how := float64(c.cpu())/float64(floor.cpu()), ""
		if r, ok := pairedCPURatio(ps, key, keyFloor); ok {
			rc, how = r, " (paired)"
		}
		fmt.Fprintln(w, verdict(true, c.allocs() <= 60, "", fmt.Sprintf("%s, 1 goroutine: %.0f allocations per pair (bar ≤ 60; the floor: %.0f)",
			title, c.allocs(), floor.allocs())))
		fmt.Fprintln(w, verdict(true, rc <= 1.1, "", fmt.Sprintf("%s, 1 goroutine: client CPU per pair %.2f× the floor's (bar ≤ 1.1×)%s", title, rc, how)))
	}
}

// barVs prints the verdict of c ÷ base ≥ min; text has one %.3f for the ratio.
// barAt1 checks a bar on a ÷ b at 1 goroutine: read from the paired
// measurement when the run has it (the line says "paired"), else from the
// tables' rounds.
func barAt1(w io.Writer, ps []*pairedCell, un []*cell, a, b string, min float64, label, text string) {
	barPaired(w, ps, pairing{a: a, b: b, n: 1}, find(un, a, 1), find(un, b, 1), min, label, text)
}

// barPaired checks a bar on the ratio of pairing pr: read from the paired
// measurement when the run has it (the line says "paired"), else from the
// tables' cells c ÷ base.
func barPaired(w io.Writer, ps []*pairedCell, pr pairing, c, base *cell, min float64, label, text string) {
	if r, ok := pairedBy(ps, pr, (*pairedCell).ratio); ok {
		fmt.Fprintln(w, verdict(true, r >= min, label, fmt.Sprintf(text, r)+" (paired)"))
		return
	}
	barVs(w, c, base, min, label, text)
}

func barVs(w io.Writer, c, base *cell, min float64, label, text string) {
	have := usable(c) && usable(base)
	r := 0.0
	if have {
		r = ratioTo(c, base)
	}
	fmt.Fprintln(w, verdict(have, r >= min, label, fmt.Sprintf(text, r)))
}
