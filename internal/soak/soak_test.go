package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/reaper"
)

// Environment of the soak and of its worker processes.
const (
	envDuration = "DBLOCK_SOAK"      // How long each dialect soaks (default 15s).
	envSeed     = "DBLOCK_SOAK_SEED" // Replays a run.
	envWorker   = "DBLOCK_SOAK_WORKER_DSN"
	envWho      = "DBLOCK_SOAK_WORKER_WHO"
)

const (
	procs      = 2 // Worker processes besides this one.
	goroutines = 3 // Workers in each process.
)

func TestMain(m *testing.M) {
	if dsn := os.Getenv(envWorker); dsn != "" {
		os.Exit(workerMain(dsn))
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionCleaner"),
		goleak.IgnoreTopFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgconn.(*PgConn).startContextWatcher.func1"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/ctxwatch.(*ContextWatcher).Watch.func1"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func duration(t *testing.T) time.Duration {
	s := os.Getenv(envDuration)
	if s == "" {
		return 15 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", envDuration, s, err)
	}
	return d
}

func seed(t *testing.T) uint64 {
	if s := os.Getenv(envSeed); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
		return n
	}
	return rand.Uint64()
}

// TestSoak is the mixed-mode soak (see the package doc) on every dialect.
func TestSoak(t *testing.T) {
	t.Parallel()
	d, sd := duration(t), seed(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("soak seed %d: replay with %s=%d (and %s=%v)", sd, envSeed, sd, envDuration, d)
		}
	})
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
		defer cancel()
		exec1(t, iso.DB, "CREATE TABLE soak_sections (name VARCHAR(255) NOT NULL, token BIGINT NOT NULL, begin_us BIGINT NOT NULL, end_us BIGINT NOT NULL, who VARCHAR(255) NOT NULL)")
		children := startWorkers(t, iso, sd, d)
		bad := &problems{}
		runHere(t, ctx, iso, sd, d, bad)
		for i, c := range children {
			if err := c.cmd.Wait(); err != nil {
				t.Errorf("worker process %d: %v\n%s", i, err, c.out.String())
			}
		}
		for _, p := range bad.all() {
			t.Errorf("undocumented outcome: %s", p)
		}
		checkSections(t, ctx, iso)
	})
}

// runHere runs this process's workers and the administrator (force
// releases, reaper passes) for d, then closes the lockers and checks that
// they left no connection in use.
func runHere(t *testing.T, ctx context.Context, iso *dbtest.Isolated, sd uint64, d time.Duration, bad *problems) {
	l, err := newLockers(iso.DB)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var wg sync.WaitGroup
	for g := range goroutines {
		w := &worker{who: fmt.Sprintf("main/%d", g), l: l, kind: iso.Kind, rng: rand.New(rand.NewPCG(sd, uint64(g))), bad: bad}
		wg.Go(func() { w.run(wctx) })
	}
	wg.Go(func() { administer(t, wctx, iso, rand.New(rand.NewPCG(sd, 1000)), bad) })
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Errorf("close the lockers: %v", err)
	}
	if n := iso.Store().Stats().InUse; n != 0 {
		t.Errorf("%d connections still in use after the lockers closed", n)
	}
}

// administer force-releases a name now and then and runs reaper passes:
// full ones, and idle deletions with a retention of a millisecond.
func administer(t *testing.T, ctx context.Context, iso *dbtest.Isolated, rng *rand.Rand, bad *problems) {
	r, err := reaper.New(iso.DB, nil)
	if err != nil {
		t.Error(err)
		return
	}
	for ctx.Err() == nil {
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		what := "force release"
		switch rng.IntN(4) {
		case 0:
			what = "reaper pass"
			_, err = r.RunOnce(actx)
		case 1:
			what = "idle deletion"
			_, err = iso.Store().ReapIdle(actx, store.ReapParams{Age: time.Millisecond, Limit: 100})
		default:
			_, err = iso.Store().ForceRelease(actx, nil, names[rng.IntN(len(names))])
		}
		if !documented(actx, err) && !documented(ctx, err) {
			bad.add("admin %s: %v", what, err)
		}
		cancel()
	}
}

type child struct {
	cmd *exec.Cmd
	out *strings.Builder
}

// startWorkers starts the worker processes: this test binary, re-executed.
func startWorkers(t *testing.T, iso *dbtest.Isolated, sd uint64, d time.Duration) []child {
	var out []child
	for i := range procs {
		c := child{cmd: exec.Command(os.Args[0], "-test.run=^$"), out: &strings.Builder{}}
		c.cmd.Env = append(os.Environ(), envWorker+"="+iso.DSN, envWho+"="+fmt.Sprintf("proc%d", i),
			envSeed+"="+strconv.FormatUint(sd+uint64(i+1)*7919, 10), envDuration+"="+d.String())
		c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start worker %d: %v", i, err)
		}
		out = append(out, c)
	}
	return out
}

// workerMain is a worker process: goroutines workers on the DSN for the
// soak's duration. It exits 1, printing them, on undocumented outcomes.
func workerMain(dsn string) int {
	d, err := time.ParseDuration(os.Getenv(envDuration))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sd, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	db, err := dialect.Open(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	l, err := newLockers(db)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	bad := &problems{}
	var wg sync.WaitGroup
	for g := range goroutines {
		w := &worker{who: fmt.Sprintf("%s/%d", os.Getenv(envWho), g), l: l, kind: store.Of(db).Dialect.Kind(),
			rng: rand.New(rand.NewPCG(sd, uint64(g))), bad: bad}
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		bad.add("close: %v", err)
	}
	for _, p := range bad.all() {
		fmt.Fprintln(os.Stderr, "undocumented outcome:", p)
	}
	if len(bad.all()) > 0 {
		return 1
	}
	return 0
}

func exec1(t *testing.T, db *dialect.DB, q string) {
	t.Helper()
	if _, err := db.SQL().ExecContext(context.Background(), q); err != nil {
		t.Fatal(err)
	}
}
