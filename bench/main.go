// Command bench measures dblock side by side with hand-written SQL floors,
// the databases' own session locks and cirello.io/pglock, and prints one
// Markdown table per database. Speed is judged only by ratios measured in the
// same run: absolute figures on a shared machine drift from run to run.
//
//	cd bench && go run . [-db postgres,mysql] [-duration 4s] [-out README.md]
//
// Each database gets a fresh schema (PostgreSQL) or database (MySQL/MariaDB)
// named bench_<random>, migrated with migrations.Up and dropped at the end.
// Only loopback servers are used unless -postgres / -mysql say otherwise.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	_ "github.com/dblock-go/dblock/dialect/mysql" // The benchmarks run on every database.
	_ "github.com/dblock-go/dblock/dialect/postgres"
	_ "github.com/dblock-go/dblock/dialect/sqlite"
	"github.com/dblock-go/dblock/internal/store"
)

const (
	defaultPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	defaultMySQL    = "mysql://root@tcp(127.0.0.1:3306)/test"
)

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() {
	if job := os.Getenv(envChild); job != "" {
		os.Exit(childMain(job)) // A process of the cross-process cell.
	}
	os.Exit(run())
}

// run is the bench command; it returns the exit status (64: bad usage).
func run() int {
	var (
		dbs      = flag.String("db", "postgres,mysql", "databases to run, comma separated: postgres, mysql")
		duration = flag.Duration("duration", 4*time.Second, "measured time per cell (after a warm-up of a quarter of it, at most 1s)")
		out      = flag.String("out", "", "also write the results to this file; a file with the bench:results markers (README.md) has only that section replaced")
		pgDSN    = flag.String("postgres", envOr("DBLOCK_TEST_POSTGRES", defaultPostgres), "PostgreSQL server DSN")
		myDSN    = flag.String("mysql", envOr("DBLOCK_TEST_MYSQL", defaultMySQL), "MySQL/MariaDB server DSN")
		rounds   = flag.Int("rounds", 6, "rounds per cell: the cells of one table run round-robin, each round for duration/rounds")
		only     = flag.String("only", "", "run only these scenario keys, comma separated (default: all)")
		cpu      = flag.String("cpuprofile", "", "write a CPU profile of the run to this file, each sample labelled with its db and cell (go tool pprof -tagfocus cell=opt-acquire/32)")
	)
	flag.Parse()
	if *duration < 100*time.Millisecond || *duration > 5*time.Minute {
		fmt.Fprintln(os.Stderr, "bench: -duration must be between 100ms and 5m")
		return 64
	}
	if *rounds < 1 || *rounds > 20 {
		fmt.Fprintln(os.Stderr, "bench: -rounds must be between 1 and 20")
		return 64
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpu != "" {
		stopProfile, err := startProfile(*cpu)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: cpu profile: %v\n", err)
			return 1
		}
		defer stopProfile()
	}

	var buf bytes.Buffer
	w := io.MultiWriter(os.Stdout, &buf)
	fmt.Fprintf(w, "Run %s on %d CPUs (%s/%s), %s; %s measured per cell in %d interleaved rounds, each after a %s warm-up.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH,
		runtime.Version(), *duration, *rounds, warmup(*duration/time.Duration(*rounds)))

	failed := false
	for _, name := range strings.Split(*dbs, ",") {
		var kind store.Kind
		var dsn string
		switch strings.TrimSpace(name) {
		case "postgres", "postgresql", "pg":
			kind, dsn = store.Postgres, *pgDSN
		case "mysql", "mariadb":
			kind, dsn = store.MySQL, *myDSN
		default:
			fmt.Fprintf(os.Stderr, "bench: unknown database %q (want postgres or mysql)\n", name)
			return 64
		}
		if err := runDatabase(ctx, w, kind, dsn, *duration, *rounds, keys(*only)); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", kind, err)
			failed = true
		}
		if ctx.Err() != nil {
			break
		}
	}
	if *out != "" {
		if err := writeOut(*out, buf.String()); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}

func keys(s string) map[string]bool {
	if s == "" {
		return nil
	}
	m := map[string]bool{}
	for _, k := range strings.Split(s, ",") {
		m[strings.TrimSpace(k)] = true
	}
	return m
}

func warmup(d time.Duration) time.Duration { return min(d/4, time.Second).Round(time.Millisecond) }

const (
	markStart = "<!-- bench:results:start -->"
	markEnd   = "<!-- bench:results:end -->"
)

// writeOut writes results to path; when path already holds the markers only
// the text between them is replaced.
func writeOut(path, results string) error {
	old, err := os.ReadFile(path)
	if err == nil {
		s := string(old)
		i, j := strings.Index(s, markStart), strings.Index(s, markEnd)
		if i >= 0 && j > i {
			s = s[:i+len(markStart)] + "\n\n" + results + "\n" + s[j:]
			return os.WriteFile(path, []byte(s), 0o644)
		}
	}
	return os.WriteFile(path, []byte(results), 0o644)
}

// runDatabase runs every cell on one database and prints its tables.
func runDatabase(ctx context.Context, w io.Writer, kind store.Kind, dsn string, dur time.Duration, rounds int, only map[string]bool) (err error) {
	e, err := openEnv(ctx, kind, dsn)
	if err != nil {
		return err
	}
	defer func() {
		if derr := e.drop(); derr != nil && err == nil {
			err = fmt.Errorf("drop %s: %w", e.schema, derr)
		}
	}()
	quiet := waitPurged(ctx, e)
	diskBefore := probeFlush()
	warm := warmup(dur / time.Duration(rounds))
	progress := func(c *cell) {
		mode := fmt.Sprintf("%d goroutines", c.goroutines)
		if c.contended {
			mode = fmt.Sprintf("%d on one name", c.goroutines)
		}
		if c.names > 0 {
			mode = fmt.Sprintf("%d names", c.names)
		}
		fmt.Fprintf(os.Stderr, "bench: %s %-12s %-22s", e.label, c.sc.key, mode)
	}
	done := func(c *cell) {
		switch {
		case c.skip != "":
			fmt.Fprintf(os.Stderr, " skipped: %s\n", c.skip)
		case c.err != nil:
			fmt.Fprintf(os.Stderr, " FAILED: %v\n", c.err)
		default:
			fmt.Fprintf(os.Stderr, " %8.0f ops/s p50 %s errs %d\n", c.opsPerSec(), fmtDur(pct(c.lat, .5)), c.errs)
			if c.errs > 0 {
				fmt.Fprintf(os.Stderr, "bench:   first error: %v\n", c.firstErr)
			}
		}
	}
	// Each group's cells run round-robin, rounds times, so a slow spell of
	// the shared machine hits every scenario of a comparison alike.
	runGroup := func(cells []*cell) {
		for r := 0; r < rounds; r++ {
			for i := range cells {
				c := cells[(i+r)%len(cells)]
				if c.skip != "" || c.err != nil {
					continue
				}
				if ctx.Err() != nil {
					c.skip = "interrupted"
					continue
				}
				before := c.ops
				inCell(ctx, string(kind), c, func(ctx context.Context) {
					runRound(ctx, e, c, warm, dur/time.Duration(rounds))
				})
				progress(c)
				fmt.Fprintf(os.Stderr, " round %d/%d: %d holds\n", r+1, rounds, c.ops-before)
				if c.keepRows {
					continue
				}
				if rerr := e.reset(ctx, c.sc.resetTables...); rerr != nil && c.err == nil {
					c.err = rerr
				}
			}
		}
		for _, c := range cells {
			c.finish()
			progress(c)
			done(c)
		}
	}
	newCell := func(sc *scenario, goroutines int) *cell {
		c := &cell{sc: sc, goroutines: goroutines}
		if sc.missing != "" {
			c.skip = sc.missing
		}
		return c
	}

	var scs []*scenario
	for _, sc := range ordered() {
		if sc.runsOn(kind) && (only == nil || only[sc.key]) {
			scs = append(scs, sc)
		}
	}
	var uncontended, contended []*cell
	seq := 0
	for _, n := range []int{1, 8, 32} {
		var group []*cell
		for _, sc := range scs {
			c := newCell(sc, n)
			seq++
			own := make([]string, n)
			for g := range own {
				own[g] = fmt.Sprintf("%s/%d/%d", e.prefix, seq, g)
			}
			c.nameOf = func(g, _ int) string { return own[g] }
			group = append(group, c)
		}
		runGroup(group)
		uncontended = append(uncontended, group...)
	}
	for _, sc := range scs {
		c := newCell(sc, 8)
		c.contended = true
		seq++
		name := fmt.Sprintf("%s/%d/one", e.prefix, seq)
		c.nameOf = func(int, int) string { return name }
		contended = append(contended, c)
	}
	runGroup(contended)
	var procs, fairProcs, handoff *procCell
	if only == nil || only[keyOptAcquire] {
		kinds := []procKind{procOptimistic, procHandoff}
		if only == nil || only[keyFair] {
			kinds = append(kinds, procFair)
		}
		cells := runProcRounds(ctx, e, kinds, warm, dur)
		procs, fairProcs, handoff = cells[procOptimistic], cells[procFair], cells[procHandoff]
	}
	paired := runPairings(ctx, e, dur, only)
	namesCells := namesCheck(e, newCell, only)
	runGroup(namesCells)
	readerCells := readersCheck(e, newCell, only)
	runGroup(readerCells)
	diskAfter := probeFlush()

	fmt.Fprintf(w, "## %s\n\n`%s`\n\n", e.label, e.version)
	if quiet != "" {
		fmt.Fprintf(w, "%s.\n\n", quiet)
	}
	fmt.Fprintf(w, "%s.\n\n", diskLine(diskBefore, diskAfter))
	printUncontended(w, uncontended)
	printPaired(w, paired)
	printContended(w, contended)
	printProcs(w, procs, fairProcs, handoff, find(contended, keyOptAcquire, 8))
	printNames(w, namesCells)
	printReaders(w, readerCells)
	printBars(w, e, uncontended, contended, namesCells, paired)
	printSharedBars(w, uncontended, readerCells, paired)
	return nil
}
