package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

// ciRequired fails t under CI=true and skips it otherwise.
func ciRequired(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if v := os.Getenv("CI"); v != "" && v != "false" {
		t.Fatalf("faults: %s (CI requires it; see internal/faults/README.md for the prerequisites)", msg)
	}
	t.Skipf("faults: SKIPPED: %s", msg)
}

// pgBinDir returns the newest Debian PostgreSQL server bin directory.
func pgBinDir(t *testing.T) string {
	t.Helper()
	const base = "/usr/lib/postgresql"
	entries, err := os.ReadDir(base)
	var versions []int
	if err == nil {
		for _, e := range entries {
			if v, err := strconv.Atoi(e.Name()); err == nil {
				if _, err := os.Stat(filepath.Join(base, e.Name(), "bin", "initdb")); err == nil {
					versions = append(versions, v)
				}
			}
		}
	}
	if len(versions) == 0 {
		ciRequired(t, "no PostgreSQL server binaries under %s (apt-get install postgresql)", base)
	}
	sort.Ints(versions)
	return filepath.Join(base, strconv.Itoa(versions[len(versions)-1]), "bin")
}

// pgUser is the OS user that runs private PostgreSQL instances: postgres
// when we are root (initdb refuses root), else ourselves.
func pgUser(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		return u.Username
	}
	if _, err := user.Lookup("postgres"); err != nil {
		ciRequired(t, "running as root but there is no postgres user to run a private PostgreSQL")
	}
	return "postgres"
}

// freePort returns a loopback TCP port nobody listens on right now, below
// the kernel's range of ephemeral ports where it can: a server started
// seconds later binds it, and meanwhile the tests' own client connections
// take their local ports from that range (a Galera node's IST listener
// once found its port so taken).
func freePort(t *testing.T) int {
	t.Helper()
	if lo := ephemeralLow(); lo > 20000 {
		for range 100 {
			port := 10000 + rand.IntN(lo-10000)
			if _, given := portsGiven.LoadOrStore(port, true); given {
				continue // Handed out already, maybe not yet bound.
			}
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				_ = l.Close()
				return port
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// portsGiven are the ports freePort returned in this process.
var portsGiven sync.Map

// ephemeralLow is the lowest port of the kernel's ephemeral range, 0 when
// unknown.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}

// sharedTempDir returns a fresh directory under t.TempDir() that the
// database's OS user can use.
func sharedTempDir(t *testing.T, owner string) string {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(owner)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(base, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

// pgInstance is a private PostgreSQL server on a loopback port.
type pgInstance struct {
	bin, dir, log, user string
	port                int
}

// DSN returns a dblock DSN for database postgres on the instance.
func (p *pgInstance) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", p.port)
}

func (p *pgInstance) ctl(args ...string) error {
	_, err := runAs(p.user, filepath.Join(p.bin, "pg_ctl"), append([]string{"-D", p.dir}, args...)...)
	return err
}

// pid returns the postmaster's PID (0 when it is not running).
func (p *pgInstance) pid() int {
	b, err := os.ReadFile(filepath.Join(p.dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// children returns the PIDs whose parent is pid.
func children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command may contain spaces; fields after the last ')' are fixed.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out = append(out, c)
			}
		}
	}
	return out
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

// kill SIGKILLs the postmaster and its children (by PID) and waits until the
// postmaster is gone.
func (p *pgInstance) kill(t *testing.T) {
	t.Helper()
	pid := p.pid()
	if pid == 0 {
		return
	}
	kids := children(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, c := range kids {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	end := time.Now().Add(10 * time.Second)
	for running(pid) && time.Now().Before(end) {
		time.Sleep(10 * time.Millisecond)
	}
}

// stop stops the instance at cleanup: a fast shutdown, then SIGKILL by PID.
func (p *pgInstance) stop(t *testing.T) {
	if p.pid() == 0 {
		return
	}
	if err := p.ctl("-m", "immediate", "-w", "-t", "10", "stop"); err != nil {
		p.kill(t)
	}
}

// writeConf appends settings to the instance's postgresql.conf.
func (p *pgInstance) writeConf(t *testing.T, lines ...string) {
	t.Helper()
	p.appendFile(t, "postgresql.conf", lines...)
}

// appendFile appends lines to a file of the data directory.
func (p *pgInstance) appendFile(t *testing.T, file string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(p.dir, file), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + strings.Join(lines, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
}

func (p *pgInstance) start(t *testing.T) {
	t.Helper()
	if err := p.ctl("-l", p.log, "-w", "-t", "60", "start"); err != nil {
		logTail, _ := os.ReadFile(p.log)
		t.Fatalf("start PostgreSQL in %s: %v\n%s", p.dir, err, tail(string(logTail), 2000))
	}
	t.Cleanup(func() { p.stop(t) })
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

var (
	pgTmplOnce sync.Once
	pgTmplDir  string
	pgTmplErr  error
)

// pgTemplate initdbs once per test process (initdb takes seconds on a busy
// 2-core machine) into a directory removed by TestMain; instances copy it.
func pgTemplate(t *testing.T, bin, usr string) string {
	t.Helper()
	pgTmplOnce.Do(func() {
		base, err := os.MkdirTemp("", "dblock-faults-pg-")
		if err != nil {
			pgTmplErr = err
			return
		}
		cleanupDirs = append(cleanupDirs, base)
		if err := os.Chmod(base, 0o755); err != nil {
			pgTmplErr = err
			return
		}
		if os.Geteuid() == 0 {
			u, _ := user.Lookup(usr)
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			_ = os.Chown(base, uid, gid)
		}
		dir := filepath.Join(base, "data")
		if _, err := runAs(usr, filepath.Join(bin, "initdb"), "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
			pgTmplErr = fmt.Errorf("initdb: %w", err)
			return
		}
		hba, err := os.OpenFile(filepath.Join(dir, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			pgTmplErr = err
			return
		}
		_, _ = hba.WriteString("\nhost replication postgres 127.0.0.1/32 trust\n")
		_ = hba.Close()
		pgTmplDir = dir
	})
	if pgTmplErr != nil {
		t.Fatalf("PostgreSQL template: %v", pgTmplErr)
	}
	return pgTmplDir
}

// cleanupDirs are removed by TestMain when the tests end.
var cleanupDirs []string

// newPrimary copies the initdb template and starts a private PostgreSQL with extra settings.
func newPrimary(t *testing.T, settings ...string) *pgInstance {
	t.Helper()
	bin := pgBinDir(t)
	usr := pgUser(t)
	base := sharedTempDir(t, usr)
	p := &pgInstance{bin: bin, dir: filepath.Join(base, "primary"), log: filepath.Join(base, "primary.log"), user: usr, port: freePort(t)}
	tmpl := pgTemplate(t, bin, usr)
	if out, err := exec.Command("cp", "-a", tmpl, p.dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the initdb template: %v: %s", err, out)
	}
	p.writeConf(t, append([]string{
		fmt.Sprintf("port = %d", p.port),
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("unix_socket_directories = '%s'", base),
		"fsync = on",
		"max_connections = 50",
		"shared_buffers = 32MB",
	}, settings...)...)
	p.start(t)
	return p
}

// newStandby base-backs-up primary into a streaming standby named app. It
// streams from via (host:port) when set, else straight from the primary.
func newStandby(t *testing.T, primary *pgInstance, app, via string) *pgInstance {
	t.Helper()
	base := filepath.Dir(primary.dir)
	s := &pgInstance{bin: primary.bin, dir: filepath.Join(base, app), log: filepath.Join(base, app+".log"), user: primary.user, port: freePort(t)}
	if _, err := runAs(s.user, filepath.Join(s.bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port),
		"-U", "postgres", "-D", s.dir, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"); err != nil {
		t.Fatalf("pg_basebackup: %v", err)
	}
	host, port := "127.0.0.1", strconv.Itoa(primary.port)
	if via != "" {
		var err error
		if host, port, err = net.SplitHostPort(via); err != nil {
			t.Fatal(err)
		}
	}
	// pg_basebackup -R wrote primary_conninfo into postgresql.auto.conf,
	// which overrides postgresql.conf: append there, where the last line wins.
	s.appendFile(t, "postgresql.auto.conf",
		fmt.Sprintf("port = %d", s.port),
		fmt.Sprintf("primary_conninfo = 'host=%s port=%s user=postgres application_name=%s'", host, port, app),
		"wal_retrieve_retry_interval = 200ms",
		"hot_standby = on",
	)
	s.start(t)
	return s
}

// openPG opens a dblock DB on dsn with a timeout.
func openPG(t *testing.T, dsn string) *dialect.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, err := dialect.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", store.Redact(dsn), err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// migrate applies dblock's migrations on db.
func migrate(t *testing.T, db *dialect.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("migrate: %v", err)
	}
}

// waitReplication waits until the primary reports app streaming in state
// (sync or async).
func waitReplication(t *testing.T, primary *dialect.DB, app, state string) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n int
		err := store.Of(primary).GetContext(ctx, &n, `SELECT count(*) FROM pg_stat_replication
WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2`, app, state)
		cancel()
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(end) {
			var rows []string
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = store.Of(primary).SelectContext(ctx, &rows, `SELECT application_name || ' ' || state || ' ' || sync_state FROM pg_stat_replication`)
			cancel()
			t.Fatalf("standby %s not streaming (%s) after 30 s: %v; pg_stat_replication: %q", app, state, err, rows)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
