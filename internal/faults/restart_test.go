package faults

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/faults/history"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/reaper"
)

// restartTarget is a private database server a test may restart.
type restartTarget struct {
	kind store.Kind
	// admin is a pool for checks, not used by the clients under test.
	admin *dialect.DB
	// clientDSN is the DSN of the clients under test; their sessions are
	// recognisable by sessions().
	clientDSN string
	restart   func() error
	// sessions counts the server sessions of the clients under test.
	sessions func(ctx context.Context) (int, error)
}

// pgRestartTarget starts a private PostgreSQL; the clients' sessions carry
// their own application_name, restarts are pg_ctl -m fast restart.
func pgRestartTarget(t *testing.T) *restartTarget {
	pg := newPrimary(t)
	admin := openPG(t, pg.DSN())
	migrate(t, admin)
	tag := "faults_restart_" + randHex(4)
	u, err := url.Parse(pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", tag)
	u.RawQuery = q.Encode()
	return &restartTarget{
		kind: store.Postgres, admin: admin, clientDSN: u.String(),
		restart: func() error { return pg.ctl("-l", pg.log, "-m", "fast", "-w", "-t", "60", "restart") },
		sessions: func(ctx context.Context) (int, error) {
			var n int
			err := store.Of(admin).GetContext(ctx, &n, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", tag)
			return n, err
		},
	}
}

// mariaRestartTarget starts a private MariaDB; the clients log in as an
// account of their own, restarts are a normal shutdown (SIGTERM) and start.
func mariaRestartTarget(t *testing.T) *restartTarget {
	if os.Geteuid() != 0 {
		ciRequired(t, "the MariaDB restart test runs mariadbd as the mysql user and needs root")
	}
	if _, err := exec.LookPath("mariadb-install-db"); err != nil {
		ciRequired(t, "mariadb-install-db not found (apt-get install -y mariadb-server)")
	}
	m := newMaria(t, sharedTempDir(t, "mysql"), "restart", 1, "")
	root := openPG(t, m.dsn("mysql"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	user, pass := "faults_restart", randHex(8)
	for _, q := range []string{
		"CREATE DATABASE dblock",
		fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'", user, pass),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON dblock.* TO '%s'@'127.0.0.1'", user),
	} {
		if _, err := root.SQL().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	admin := openPG(t, m.dsn("dblock"))
	migrate(t, admin)
	return &restartTarget{
		kind: store.MySQL, admin: admin,
		clientDSN: fmt.Sprintf("mysql://%s:%s@tcp(127.0.0.1:%d)/dblock", user, pass, m.port),
		restart: func() error {
			if err := m.shutdown(); err != nil {
				return err
			}
			m.start(t)
			return nil
		},
		sessions: func(ctx context.Context) (int, error) {
			var n int
			err := store.Of(admin).GetContext(ctx, &n, "SELECT count(*) FROM information_schema.PROCESSLIST WHERE USER = ?", user)
			return n, err
		},
	}
}

// TestFaultRestartUnderLoad restarts the database server (PostgreSQL:
// pg_ctl -m fast restart; MariaDB: SIGTERM and start) while it is used:
// four clients acquire, hold (renewed 1 s leases) and release two names,
// three fair clients queue for a third name, one client holds a durable
// 10 s renewed lease, one holds a pessimistic lock (its transaction must
// end with the server), and the reaper runs every second. Afterwards:
//   - the durable lease is still held (the restart took well under its TTL)
//     or was reported lost;
//   - the pessimistic holder saw Done() close with ErrLost, and a rival gets
//     its name;
//   - every holder either kept renewing or was told it lost the lock: each
//     history (unknown outcomes for the calls the restart cut) passes the
//     overlap, token and porcupine checks;
//   - clients acquire again and the reaper completes passes after the restart;
//   - closing everything leaves no goroutines, no open pooled connections
//     and no server sessions of the clients behind.
func TestFaultRestartUnderLoad(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		restartUnderLoad(t, pgRestartTarget(t))
	})
	t.Run("mysql", func(t *testing.T) {
		restartUnderLoad(t, mariaRestartTarget(t))
	})
}

func restartUnderLoad(t *testing.T, tg *restartTarget) {
	baseline := runtime.NumGoroutine()
	db := openPG(t, tg.clientDSN)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var closers []func() error
	newOpt := func() *optimistic.Locker {
		l, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, l.Close)
		return l
	}
	durableLocker := newOpt()
	const durableTTL = 10 * time.Second
	durable, err := durableLocker.Acquire(ctx, "durable", dblock.WithTTL(durableTTL))
	if err != nil {
		t.Fatal(err)
	}

	// A pessimistic holder: its transaction cannot survive the restart.
	pl, err := pessimistic.New(db, &pessimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	closers = append(closers, pl.Close)
	txLease, err := pl.Acquire(ctx, "tx-held", dblock.WithTTL(time.Minute), dblock.WithToken())
	if err != nil {
		t.Fatal(err)
	}
	txLost := make(chan time.Time, 1)
	go func() {
		<-txLease.Done()
		txLost <- time.Now()
	}()

	// The reaper, every second.
	var passes, passErrs, passesAfter atomic.Int64
	var restarted atomic.Bool
	rp, err := reaper.New(db, &reaper.Config{Schedule: "@every 1s", Logger: quiet, WaiterGrace: time.Millisecond,
		QueryTimeout: 5 * time.Second, Hooks: &reaper.Hooks{OnPass: func(s reaper.Stats, err error) {
			passes.Add(1)
			if err != nil {
				passErrs.Add(1)
			} else if s.Worked && restarted.Load() {
				passesAfter.Add(1)
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	rp.Start()

	type client struct {
		rec        *history.Recorder
		mode, name string
		c          lockClient
	}
	var clients []client
	for i := range 4 {
		rec, _ := history.NewRecorder(fmt.Sprintf("opt%d", i), "")
		clients = append(clients, client{rec, dblock.ModeOptimistic, fmt.Sprintf("hot%d", i%2), lockerClient{l: newOpt()}})
	}
	for i := range 3 {
		rec, _ := history.NewRecorder(fmt.Sprintf("fair%d", i), "")
		fl, err := fairqueue.New(db, &fairqueue.Config{Logger: quiet,
			HeartbeatInterval: 250 * time.Millisecond, HeartbeatTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, fl.Close)
		clients = append(clients, client{rec, dblock.ModeFair, "fairhot", lockerClient{l: fl}})
	}
	var wg sync.WaitGroup
	loopCtx, stopLoop := context.WithCancel(context.Background())
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			workLoop(loopCtx, c.c, c.rec, c.mode, c.name, time.Second, 0.05, func() bool { return true })
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	restartAt := time.Now()
	if err := tg.restart(); err != nil {
		stopLoop()
		wg.Wait()
		t.Fatalf("restart: %v", err)
	}
	restarted.Store(true)
	restartTook := time.Since(restartAt)
	afterRestart := time.Now()
	time.Sleep(3 * time.Second)
	stopLoop()
	wg.Wait()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	if err := rp.Stop(sctx); err != nil {
		t.Errorf("reaper Stop: %v", err)
	}
	scancel()

	// The durable lease.
	if err := durable.Err(); err != nil {
		if restartTook < durableTTL/2 {
			t.Errorf("the durable lease was lost although the restart took only %v: %v", restartTook, err)
		} else if !errors.Is(err, dblock.ErrLost) {
			t.Errorf("durable lease: Err() = %v, want nil or ErrLost", err)
		}
	} else {
		h, err := store.Of(tg.admin).LeaseHolder(ctx, nil, "durable")
		if err != nil || h.Owner != durable.Owner() || !h.Held() {
			t.Errorf("the durable lease believes it holds the name, the database says owner %q held=%v (%v)", h.Owner, h.Held(), err)
		}
		if err := durable.Release(ctx); err != nil {
			t.Errorf("release the durable lease: %v", err)
		}
	}

	// The pessimistic holder lost its transaction with the restart.
	var txNoticed time.Duration
	select {
	case at := <-txLost:
		txNoticed = at.Sub(restartAt)
	case <-time.After(15 * time.Second):
		t.Errorf("the pessimistic holder's Done() is still open 15 s after the restart " +
			"(a restarted MariaDB hands out connection ids from 1 again: a liveness check by id alone finds a new session under the holder's id)")
	}
	if err := txLease.Err(); !errors.Is(err, dblock.ErrLost) {
		t.Errorf("pessimistic holder: Err() = %v, want ErrLost", err)
	}
	if err := txLease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
		t.Errorf("pessimistic Release after the restart = %v, want ErrLost", err)
	}
	rival := newOpt()
	if l, err := rival.TryAcquire(ctx, "tx-held", dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute)); err != nil {
		t.Errorf("rival TryAcquire of the pessimistic name after the restart: %v", err)
	} else {
		if int64(l.Token()) <= int64(txLease.TokenOf("tx-held")) {
			t.Errorf("rival token %d is not above the pessimistic holder's %d", l.Token(), txLease.TokenOf("tx-held"))
		}
		_ = l.Release(ctx)
	}

	var all []history.Record
	for _, c := range clients {
		all = append(all, c.rec.Records()...)
	}
	ops := history.Ops(all)
	grantedAfter := map[string]int{}
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Outcome == history.OK && op.Call > afterRestart.UnixNano() {
			grantedAfter[op.Name]++
		}
	}
	sum := history.Summarize(ops)
	t.Logf("restart took %v; history: %v; acquisitions after the restart per name: %v; pessimistic holder told %v after the restart began; "+
		"reaper: %d passes (%d failed, %d worked after the restart)",
		restartTook.Round(time.Millisecond), sum, grantedAfter, txNoticed.Round(time.Millisecond), passes.Load(), passErrs.Load(), passesAfter.Load())
	for _, name := range []string{"hot0", "hot1", "fairhot"} {
		if grantedAfter[name] == 0 {
			t.Errorf("no acquisition of %s succeeded in the 3 s after the restart", name)
		}
	}
	if passesAfter.Load() == 0 {
		t.Errorf("the reaper completed no pass after the restart")
	}
	checkHistory(t, ops, "clients across the restart")

	// No leaks once everything is closed: goroutines, pooled connections,
	// server sessions.
	for _, c := range closers {
		if err := c(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	_ = db.Close()
	if n := db.SQL().Stats().OpenConnections; n != 0 {
		t.Errorf("%d connections of the clients' pool still open after Close: a connection was not returned", n)
	}
	end := time.Now().Add(10 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := tg.sessions(cctx)
		ccancel()
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Errorf("%d server sessions of the clients 10 s after every pool was closed (%v)", n, err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for runtime.NumGoroutine() > baseline+2 && time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline+2 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("%d goroutines after Close, %d before the test: leak?\n%s", n, baseline, tail(string(buf), 8000))
	}
}
