package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/faults/history"
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

// newGalera starts a 3-node Galera cluster (galera-4, rsync SST) on loopback
// ports; every node is SIGKILLed by PID at cleanup.
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
wsrep_sst_receive_address=127.0.0.1:%d
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=32M;evs.keepalive_period=PT0.2S;evs.inactive_check_period=PT0.2S;evs.suspect_timeout=PT1S;evs.inactive_timeout=PT2S;evs.install_timeout=PT2S"
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
	err = db.QueryRowxContext(ctx, `SELECT
  (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'),
  (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_STATUS'),
  (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE')`).Scan(&state, &status, &got)
	return err == nil && state == "Synced" && status == "Primary" && got >= size
}

// TestFaultGalera runs lease locks across the three writers of a MariaDB
// Galera cluster: three clients, one per node, acquire and release one name
// for 5 s (certification failures, 1213, must read as "not acquired" or be
// retried, never as a hold); the history must pass the overlap, token and
// porcupine checks. It then checks that pessimistic mode refuses a Galera
// node (FOR UPDATE is node-local there) unless told otherwise, and that after two
// nodes are killed the survivor, without quorum, reports ErrUnavailable.
func TestFaultGalera(t *testing.T) {
	nodes := newGalera(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	{
		boot, err := dialect.Open(ctx, "mysql://root@unix("+nodes[0].sock+")/mysql")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := boot.ExecContext(ctx, "CREATE DATABASE dblock"); err != nil {
			t.Fatal(err)
		}
		_ = boot.Close()
	}
	dbs := make([]*dialect.DB, 3)
	for i, n := range nodes {
		dbs[i] = openPG(t, n.DSN())
	}
	migrate(t, dbs[0])

	t.Run("optimistic across writers", func(t *testing.T) {
		recs := make([]*history.Recorder, 3)
		var wg sync.WaitGroup
		loopCtx, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		for i := range 3 {
			recs[i], _ = history.NewRecorder(nodes[i].name, "")
			l, err := optimistic.New(dbs[i], &optimistic.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				workLoop(loopCtx, lockerClient{l: l}, recs[i], dblock.ModeOptimistic, "galera", time.Second, 0, func() bool { return true })
			}()
		}
		wg.Wait()
		var all []history.Record
		for _, r := range recs {
			all = append(all, r.Records()...)
		}
		ops := history.Ops(all)
		sum := history.Summarize(ops)
		t.Logf("3 writers: %v", sum)
		if sum.Granted < 10 {
			t.Fatalf("only %d acquisitions across the cluster", sum.Granted)
		}
		res, err := history.Check(ops, 30*time.Second)
		if err != nil {
			t.Fatalf("history check across Galera writers: %v", err)
		}
		if res == porcupine.Unknown {
			t.Logf("porcupine: no verdict within 30 s (the O(n) checks passed)")
		}
	})

	t.Run("pessimistic across writers", func(t *testing.T) {
		// By default pessimistic mode refuses a Galera node: FOR UPDATE
		// locks the row on the node that ran it only.
		p1, err := pessimistic.New(dbs[0], &pessimistic.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer p1.Close()
		if l, err := p1.Acquire(ctx, "galera-tx"); !errors.Is(err, dialect.ErrMultiPrimary) {
			if l != nil {
				_ = l.Release(ctx)
			}
			t.Fatalf("pessimistic Acquire on a Galera node = %v, want an error wrapping dialect.ErrMultiPrimary", err)
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

	t.Run("quorum loss", func(t *testing.T) {
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
			lease, err := l.TryAcquire(actx, "galera-quorum", dblock.WithTTL(time.Minute))
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
