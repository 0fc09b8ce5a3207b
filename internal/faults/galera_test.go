package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/faults/history"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

const galeraProvider = "/usr/lib/galera/libgalera_smm.so"

// galeraNode is one private MariaDB Galera node on loopback.
type galeraNode struct {
	name, cnf, sock, errLog string
	cmd                     *exec.Cmd
	done                    chan struct{}
}

// DSN returns a dblock DSN for database dblock on the node (root over its socket).
func (n *galeraNode) DSN() string { return "mysql://root@unix(" + n.sock + ")/dblock" }

func (n *galeraNode) kill() {
	if n.cmd == nil {
		return
	}
	select {
	case <-n.done:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
	}
}

// failoverWindow is how long the node failover's clients run after the
// kill: the survivors evict the dead node after evs.inactive_timeout (3 s;
// with the suspicion at 1 s a survivor starved of CPU on a loaded 2-core
// machine was suspected too, and the cluster lost quorum), and each
// client must then get answers from them.
const failoverWindow = 8 * time.Second

// newGalera starts a 3-node Galera cluster (galera-4, rsync SST) on loopback
// ports; every node is SIGKILLed by PID at cleanup. The nodes do not retry
// an autocommit statement that fails certification (wsrep_retry_autocommit=0,
// the default retries once), so certification failures reach the clients.
func newGalera(t *testing.T) []*galeraNode {
	t.Helper()
	if _, err := os.Stat(galeraProvider); err != nil {
		ciRequired(t, "no Galera provider %s (apt-get install -y galera-4 rsync)", galeraProvider)
	}
	for _, bin := range []string{"mariadbd", "mariadb-install-db", "rsync"} {
		if _, err := exec.LookPath(bin); err != nil {
			if _, serr := os.Stat("/usr/sbin/" + bin); serr != nil {
				ciRequired(t, "%s not found (apt-get install -y mariadb-server galera-4 rsync)", bin)
			}
		}
	}
	if os.Geteuid() != 0 {
		ciRequired(t, "the Galera test runs mariadbd as the mysql user and needs root")
	}
	if _, err := user.Lookup("mysql"); err != nil {
		ciRequired(t, "no mysql user")
	}
	dir := sharedTempDir(t, "mysql")
	tmpl := filepath.Join(dir, "template")
	if out, err := exec.Command("mariadb-install-db", "--datadir="+tmpl, "--user=mysql",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v: %s", err, tail(string(out), 2000))
	}
	var gports, iports, sports, ports [3]int
	for i := range 3 {
		gports[i], iports[i], sports[i], ports[i] = freePort(t), freePort(t), freePort(t), freePort(t)
	}
	var addrs []string
	for _, p := range gports {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
	}
	nodes := make([]*galeraNode, 3)
	for i := range 3 {
		name := fmt.Sprintf("node%d", i+1)
		data := filepath.Join(dir, name)
		if out, err := exec.Command("cp", "-a", tmpl, data).CombinedOutput(); err != nil {
			t.Fatalf("copy datadir: %v: %s", err, out)
		}
		n := &galeraNode{name: name, cnf: filepath.Join(dir, name+".cnf"), sock: filepath.Join(dir, name+".sock"),
			errLog: filepath.Join(dir, name+".err")}
		cnf := fmt.Sprintf(`[mysqld]
datadir=%s
socket=%s
port=%d
bind-address=127.0.0.1
pid-file=%s
log-error=%s
user=mysql
skip-name-resolve
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=32M
innodb_flush_log_at_trx_commit=2
wsrep_on=ON
wsrep_provider=%s
wsrep_cluster_name=dblock_faults
wsrep_cluster_address=gcomm://%s
wsrep_node_name=%s
wsrep_node_address=127.0.0.1
wsrep_sst_method=rsync
wsrep_retry_autocommit=0
wsrep_sst_receive_address=127.0.0.1:%d
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=32M;evs.keepalive_period=PT0.2S;evs.inactive_check_period=PT0.2S;evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S;evs.install_timeout=PT3S"
`, data, n.sock, ports[i], filepath.Join(dir, name+".pid"), n.errLog, galeraProvider, strings.Join(addrs, ","), name,
			sports[i], gports[i], iports[i])
		if err := os.WriteFile(n.cnf, []byte(cnf), 0o644); err != nil {
			t.Fatal(err)
		}
		nodes[i] = n
	}
	start := func(n *galeraNode, extra ...string) {
		bin, err := exec.LookPath("mariadbd")
		if err != nil {
			bin = "/usr/sbin/mariadbd"
		}
		n.cmd = exec.Command(bin, append([]string{"--defaults-file=" + n.cnf}, extra...)...)
		n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := n.cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", n.name, err)
		}
		n.done = make(chan struct{})
		go func() { _ = n.cmd.Wait(); close(n.done) }()
		t.Cleanup(n.kill)
	}
	waitSynced := func(n *galeraNode, size int) {
		end := time.Now().Add(90 * time.Second)
		for {
			select {
			case <-n.done:
				log, _ := os.ReadFile(n.errLog)
				t.Fatalf("%s exited: %s", n.name, tail(string(log), 3000))
			default:
			}
			if ok := galeraStatus(n, size); ok {
				return
			}
			if time.Now().After(end) {
				log, _ := os.ReadFile(n.errLog)
				t.Fatalf("%s not synced in a cluster of %d after 90 s: %s", n.name, size, tail(string(log), 3000))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	start(nodes[0], "--wsrep-new-cluster")
	waitSynced(nodes[0], 1)
	for i := 1; i < 3; i++ {
		start(nodes[i])
		waitSynced(nodes[i], i+1)
	}
	return nodes
}

// galeraStatus reports whether n is Synced in a primary component of size.
func galeraStatus(n *galeraNode, size int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	db, err := dialect.Open(ctx, "mysql://root@unix("+n.sock+")/mysql")
	if err != nil {
		return false
	}
	defer db.Close()
	var state, status string
	var got int
	err = store.Of(db).QueryRowxContext(ctx, `SELECT
  (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'),
  (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_STATUS'),
  (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE')`).Scan(&state, &status, &got)
	return err == nil && state == "Synced" && status == "Primary" && got >= size
}

// galeraCounters reads a node's certification failure and brute-force
// abort counters (wsrep_local_cert_failures, wsrep_local_bf_aborts).
func galeraCounters(ctx context.Context, db *dialect.DB) (cert, bf int64) {
	rows, err := store.Of(db).QueryxContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')")
	if err != nil {
		return 0, 0
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if rows.Scan(&name, &v) != nil {
			continue
		}
		switch strings.ToLower(name) {
		case "wsrep_local_cert_failures":
			cert = v
		case "wsrep_local_bf_aborts":
			bf = v
		}
	}
	return cert, bf
}

// galeraWriters runs one client per node (lockers built by mk) on one name
// for d, with a share of calls cut short (unknown outcomes), and checks
// the merged history. It reports how many certification conflicts (1213)
// the clients met, counted from their retry logs and errors, and from the
// nodes' counters.
func galeraWriters(t *testing.T, ctx context.Context, dbs []*dialect.DB, nodes []*galeraNode, mode string,
	mk func(db *dialect.DB, logger *slog.Logger) (dblock.Locker, error), d time.Duration) (conflicts int64) {
	logger, retried := newCountLogger("1213", "Deadlock", "deadlock")
	var cert0, bf0 int64
	for _, db := range dbs {
		c, b := galeraCounters(ctx, db)
		cert0, bf0 = cert0+c, bf0+b
	}
	recs := make([]*history.Recorder, len(dbs))
	var wg sync.WaitGroup
	loopCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	name := "galera-" + mode
	for i := range dbs {
		recs[i], _ = history.NewRecorder(nodes[i].name, "")
		l, err := mk(dbs[i], logger)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			workLoop(loopCtx, lockerClient{l: l}, recs[i], mode, name, time.Second, 0.1, func() bool { return true })
		}()
	}
	wg.Wait()
	var cert1, bf1 int64
	for _, db := range dbs {
		c, b := galeraCounters(ctx, db)
		cert1, bf1 = cert1+c, bf1+b
	}
	var all []history.Record
	for _, r := range recs {
		all = append(all, r.Records()...)
	}
	ops := history.Ops(all)
	seen := 0
	for _, op := range ops {
		if strings.Contains(op.Err, "1213") {
			seen++
		}
	}
	sum := history.Summarize(ops)
	t.Logf("%s, %d writers for %v: %v; certification conflicts (1213): %d retried inside the library, %d returned to callers; "+
		"nodes counted %d certification failures and %d brute-force aborts",
		mode, len(dbs), d, sum, retried.Load(), seen, cert1-cert0, bf1-bf0)
	if sum.Granted < 10 {
		t.Fatalf("only %d acquisitions across the cluster", sum.Granted)
	}
	if sum.Unknown == 0 {
		t.Errorf("no call had an unknown outcome: the cut calls did not happen")
	}
	checkHistory(t, ops, mode+" across Galera writers")
	return retried.Load() + int64(seen)
}

// failoverClient is a lockClient over one Locker per Galera node. It sends
// acquisitions to its current node and moves to the next node after an
// acquisition whose outcome is unknown (an error), as an application
// behind a list of nodes would; a lease stays bound to the node that
// granted it (renewal and release go there).
type failoverClient struct {
	lockers []dblock.Locker
	cur     int
	moves   int
}

func (c *failoverClient) acquire(ctx context.Context, name string, ttl, wait time.Duration) (held, history.Outcome, error) {
	h, out, err := lockerClient{l: c.lockers[c.cur]}.acquire(ctx, name, ttl, wait)
	if out == history.Unknown && ctx.Err() == nil {
		c.cur = (c.cur + 1) % len(c.lockers)
		c.moves++
	}
	if h != nil {
		h = boundedRelease{h}
	}
	return h, out, err
}

// boundedRelease gives up a release after 1.5 s: Release retries while the
// node that granted the lease is unreachable, and a client that lost its
// node moves on (the lease runs out by itself).
type boundedRelease struct{ held }

func (b boundedRelease) release(ctx context.Context) (history.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	return b.held.release(ctx)
}

func (c *failoverClient) close() {
	for _, l := range c.lockers {
		_ = l.Close()
	}
}

// TestFaultGalera runs lease locks across the three writers of a MariaDB
// Galera cluster: optimistic, then fair, with one client per node acquiring
// and releasing one name for 5 s, a tenth of the calls cut short (unknown
// outcomes); certification failures (1213) must read as "not acquired" or
// be retried, never as a hold, and the merged history must pass the
// overlap, token and porcupine checks. Then it checks that pessimistic mode
// refuses a Galera node (FOR UPDATE is node-local there) unless told
// otherwise; SIGKILLs one node while clients of both lease modes run, who
// must move to a live node and keep acquiring with a legal history; and
// finally kills a second node, after which the survivor, without quorum,
// reports ErrUnavailable.
func TestFaultGalera(t *testing.T) {
	nodes := newGalera(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	{
		boot, err := dialect.Open(ctx, "mysql://root@unix("+nodes[0].sock+")/mysql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := boot.SQL().ExecContext(ctx, "CREATE DATABASE dblock"); err != nil {
			t.Fatal(err)
		}
		_ = boot.Close()
	}
	dbs := make([]*dialect.DB, 3)
	for i, n := range nodes {
		dbs[i] = openPG(t, n.DSN())
	}
	migrate(t, dbs[0])
	mkOptimistic := func(db *dialect.DB, logger *slog.Logger) (dblock.Locker, error) {
		return optimistic.New(db, &optimistic.Config{Logger: logger})
	}
	mkFair := func(db *dialect.DB, logger *slog.Logger) (dblock.Locker, error) {
		return fairqueue.New(db, &fairqueue.Config{Logger: logger,
			HeartbeatInterval: 250 * time.Millisecond, HeartbeatTimeout: time.Second})
	}

	var conflicts int64
	t.Run("optimistic across writers", func(t *testing.T) {
		conflicts += galeraWriters(t, ctx, dbs, nodes, dblock.ModeOptimistic, mkOptimistic, 5*time.Second)
	})
	t.Run("fair across writers", func(t *testing.T) {
		conflicts += galeraWriters(t, ctx, dbs, nodes, dblock.ModeFair, mkFair, 5*time.Second)
	})
	// Three writers on one name for 10 s conflict every time it was run
	// here (2 to 8 times); a run without any would not have tested the
	// handling of 1213.
	if conflicts == 0 {
		t.Errorf("no client met a certification failure (1213) in 10 s of three writers on one name: the conflict path went untested")
	}

	t.Run("pessimistic across writers", func(t *testing.T) {
		// By default pessimistic mode refuses a Galera node: FOR UPDATE
		// locks the row on the node that ran it only.
		p1, err := pessimistic.New(dbs[0], &pessimistic.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer p1.Close()
		if l, err := p1.Acquire(ctx, "galera-tx"); !errors.Is(err, pessimistic.ErrMultiPrimary) {
			if l != nil {
				_ = l.Release(ctx)
			}
			t.Fatalf("pessimistic Acquire on a Galera node = %v, want an error wrapping pessimistic.ErrMultiPrimary", err)
		}
		// With AllowMultiPrimary it runs, and is exclusive on one node only:
		// what the refusal protects against, recorded.
		a1, err := pessimistic.New(dbs[0], &pessimistic.Config{Logger: quiet, AllowMultiPrimary: true})
		if err != nil {
			t.Fatal(err)
		}
		defer a1.Close()
		a2, err := pessimistic.New(dbs[1], &pessimistic.Config{Logger: quiet, AllowMultiPrimary: true})
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Close()
		l1, err := a1.Acquire(ctx, "galera-tx")
		if err != nil {
			t.Fatalf("pessimistic Acquire with AllowMultiPrimary: %v", err)
		}
		defer func() { _ = l1.Release(ctx) }()
		l2, err := a2.TryAcquire(ctx, "galera-tx")
		if err == nil {
			_ = l2.Release(ctx)
			t.Logf("with AllowMultiPrimary, node2 acquired a name node1 holds (FOR UPDATE is node-local), as documented")
			return
		}
		t.Logf("pessimistic TryAcquire on node2 while node1 holds the name: %v", err)
	})

	t.Run("node failover", func(t *testing.T) {
		// Three clients per lease mode, client i starting on node i; node
		// 3 is SIGKILLed after 2 s and the clients run failoverWindow more.
		type run struct {
			mode    string
			clients []*failoverClient
			recs    []*history.Recorder
		}
		runs := []*run{{mode: dblock.ModeOptimistic}, {mode: dblock.ModeFair}}
		// An acquire whose answer a dying node lost reads the row back for
		// up to StatementTimeout before it gives up; a client with a list of
		// nodes keeps that short.
		mkOpt := func(db *dialect.DB, logger *slog.Logger) (dblock.Locker, error) {
			return optimistic.New(db, &optimistic.Config{Logger: logger, StatementTimeout: 2 * time.Second})
		}
		// A fair take whose answer a dying node lost is read back for a
		// round of ReleaseTimeout at least (5 s by default, as long as a
		// call's own timeout here: a call caught by the kill then returned
		// at the end of the run, and its client never moved); a client
		// with a list of nodes keeps that short too.
		mkFairFailover := func(db *dialect.DB, logger *slog.Logger) (dblock.Locker, error) {
			return fairqueue.New(db, &fairqueue.Config{Logger: logger,
				HeartbeatInterval: 250 * time.Millisecond, HeartbeatTimeout: time.Second, ReleaseTimeout: 2 * time.Second})
		}
		loopCtx, stop := context.WithCancel(ctx)
		defer stop()
		var wg sync.WaitGroup
		for _, r := range runs {
			mk := mkOpt
			if r.mode == dblock.ModeFair {
				mk = mkFairFailover
			}
			for i := range 3 {
				c := &failoverClient{cur: i}
				for _, db := range dbs {
					l, err := mk(db, quiet)
					if err != nil {
						t.Fatal(err)
					}
					c.lockers = append(c.lockers, l)
				}
				defer c.close()
				rec, _ := history.NewRecorder(fmt.Sprintf("%s-c%d", r.mode, i), "")
				r.clients, r.recs = append(r.clients, c), append(r.recs, rec)
				wg.Add(1)
				go func() {
					defer wg.Done()
					workLoop(loopCtx, c, rec, r.mode, "galera-failover-"+r.mode, time.Second, 0.05, func() bool { return true })
				}()
			}
		}
		time.Sleep(2 * time.Second)
		nodes[2].kill()
		killedAt := time.Now()
		time.Sleep(failoverWindow)
		stop()
		wg.Wait()
		for _, r := range runs {
			var all []history.Record
			for _, rec := range r.recs {
				all = append(all, rec.Records()...)
			}
			ops := history.Ops(all)
			// After the kill every client must get definite answers (granted
			// or busy) from the live nodes, and the fair queue must grant
			// each client in turn; an optimistic client may lose every race
			// to a faster one (the mode is not fair), so there only the
			// clients together must keep acquiring.
			granted, answered := map[string]int{}, map[string]int{}
			total := 0
			for _, op := range ops {
				if op.Kind != history.Acquire || op.Call <= killedAt.UnixNano() {
					continue
				}
				switch op.Outcome {
				case history.OK:
					granted[op.Client]++
					answered[op.Client]++
					total++
				case history.Busy:
					answered[op.Client]++
				}
			}
			moves := 0
			for i, c := range r.clients {
				moves += c.moves
				client := r.recs[i].Client()
				if answered[client] == 0 || (r.mode == dblock.ModeFair && granted[client] == 0) {
					var calls []string
					for _, op := range ops {
						if op.Client == client && op.Kind != history.Hold && op.Call > killedAt.UnixNano()-int64(time.Second) {
							d := "never returned"
							if op.Ret != math.MaxInt64 {
								d = time.Duration(op.Ret - op.Call).Round(time.Millisecond).String()
							}
							calls = append(calls, fmt.Sprintf("%s at %+v: %s after %s %s", op.Kind,
								time.Duration(op.Call-killedAt.UnixNano()).Round(time.Millisecond), op.Outcome, d, op.Err))
						}
					}
					t.Errorf("%s: client %d (started on node %d) got %d grants and %d answers in the %v after node 3 was killed; its calls from 1 s before the kill:\n%s",
						r.mode, i, i+1, granted[client], answered[client], failoverWindow, strings.Join(calls, "\n"))
				}
			}
			if r.clients[2].moves == 0 {
				t.Errorf("%s: the client on the killed node never moved to another node", r.mode)
			}
			if total == 0 {
				t.Errorf("%s: nothing was granted after node 3 was killed", r.mode)
			}
			t.Logf("%s: %v; after the kill: grants per client %v, answers per client %v; %d moves to another node",
				r.mode, history.Summarize(ops), granted, answered, moves)
			checkHistory(t, ops, r.mode+" across a Galera node failure")
		}
	})

	t.Run("quorum loss", func(t *testing.T) {
		// Node 3 is already dead (node failover); with node 2 gone too the
		// survivor is one of the two nodes of the last primary component.
		nodes[1].kill()
		nodes[2].kill()
		l, err := optimistic.New(dbs[0], &optimistic.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		// The survivor needs a few seconds (evs timeouts of 1-2 s) to
		// notice that it lost the primary component.
		var last error
		end := time.Now().Add(20 * time.Second)
		for time.Now().Before(end) {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			lease, err := l.TryAcquire(actx, "galera-quorum", dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
			acancel()
			if lease != nil {
				_ = lease.Release(ctx)
			}
			last = err
			if err != nil && !errors.Is(err, dblock.ErrNotAcquired) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if !errors.Is(last, dblock.ErrUnavailable) {
			t.Fatalf("TryAcquire on a node without quorum = %v, want an error wrapping ErrUnavailable", last)
		}
		t.Logf("without quorum: %v", last)
	})
}
