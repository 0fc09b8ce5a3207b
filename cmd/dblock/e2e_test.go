//go:build unix

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenStatus is the golden shape of status --json; goldenStatusTx that
// of a name held by a pessimistic transaction (goldenStatusTxSQLite on
// SQLite, where the hold is the database's write lock, which names no name);
// goldenStatusDenied that of names a role may not probe for transaction
// holds.
var (
	goldenStatus         = filepath.Join("..", "..", "testdata", "status.golden.json")
	goldenStatusTx       = filepath.Join("..", "..", "testdata", "status-pessimistic.golden.json")
	goldenStatusTxSQLite = filepath.Join("..", "..", "testdata", "status-pessimistic-sqlite.golden.json")
	goldenStatusDenied   = filepath.Join("..", "..", "testdata", "status-denied.golden.json")
)

// modes lists the exec flags of every lock mode the CLI offers.
var modes = []struct {
	name  string
	flags []string
}{
	{"optimistic", nil},
	{"pessimistic", []string{"--mode", "pessimistic"}},
	{"fair", []string{"--fair"}},
}

// waitFile waits until path exists and is not empty, and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	var content string
	eventually(t, "file "+filepath.Base(path), func() bool {
		b, err := os.ReadFile(path)
		content = strings.TrimSpace(string(b))
		return err == nil && content != ""
	})
	return content
}

// quietCmd starts a test command's shell script: the shell's own stderr
// (such as "Terminated" when a signal kills its sleep) is discarded, so that
// what remains on stderr is dblock's.
const quietCmd = "exec 2>/dev/null; "

// acquiringLog is the debug line exec logs (with DBLOCK_LOG=debug) just
// before it starts to acquire, once its signal handlers are in place.
const acquiringLog = "exec: acquiring"

// TestExecNoOverlap runs several exec processes at once on one name: they
// contend (all but the first ask for the lock while it is held), their
// commands never overlap, and they see strictly increasing DBLOCK_TOKENs.
func TestExecNoOverlap(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		for _, m := range modes {
			t.Run(m.name, func(t *testing.T) {
				dir := t.TempDir()
				log, goFile := filepath.Join(dir, "log"), filepath.Join(dir, "go")
				// The first section holds the lock until the test writes
				// goFile; the others find it there already.
				section := script(t, dir, "section.sh", `echo "start $DBLOCK_TOKEN $$" >> "$1"
while [ ! -f "$2" ]; do sleep 0.02; done
sleep 0.05
echo "end $DBLOCK_TOKEN $$" >> "$1"
`)
				c := cli{dsn: iso.DSN, env: []string{"DBLOCK_LOG=debug"}}
				const n = 4
				procs := make([]*proc, n)
				for i := range procs {
					args := append([]string{"exec", "--lock", "overlap", "--ttl", "10s"}, m.flags...)
					procs[i] = c.start(t, append(args, "--", "sh", section, log, goFile)...)
				}
				eventually(t, "every exec to ask for the lock and one to hold it", func() bool {
					for _, p := range procs {
						if b, _ := os.ReadFile(p.errOut); !strings.Contains(string(b), acquiringLog) {
							return false
						}
					}
					b, _ := os.ReadFile(log)
					return len(b) > 0
				})
				// Every exec has asked; one holds it and waits for goFile, so
				// the others are waiting: they contend.
				if lines := readLines(t, log); len(lines) != 1 || !strings.HasPrefix(lines[0], "start ") {
					t.Fatalf("while the first holder waits, the log has %q: want one start", lines)
				}
				if err := os.WriteFile(goFile, []byte("go"), 0o644); err != nil {
					t.Fatal(err)
				}
				for i, p := range procs {
					if r := p.wait(); r.code != 0 {
						t.Fatalf("exec %d: exit %d, stderr %q", i, r.code, r.stderr)
					}
				}
				lines := readLines(t, log)
				if len(lines) != 2*n {
					t.Fatalf("log has %d lines, want %d:\n%s", len(lines), 2*n, strings.Join(lines, "\n"))
				}
				last := int64(0)
				for i := 0; i < len(lines); i += 2 {
					start, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
					if len(start) != 3 || len(end) != 3 || start[0] != "start" || end[0] != "end" ||
						start[1] != end[1] || start[2] != end[2] {
						t.Fatalf("critical sections overlap or are malformed at line %d:\n%s", i, strings.Join(lines, "\n"))
					}
					token, err := strconv.ParseInt(start[1], 10, 64)
					if err != nil || token <= last {
						t.Fatalf("token %q after %d: want strictly increasing tokens:\n%s", start[1], last, strings.Join(lines, "\n"))
					}
					last = token
				}
			})
		}
	})
}

// processGone reports whether pid has exited (or is a zombie nobody reaped).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runtime.GOOS == "linux"
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// pessimisticTakeoverBound is how soon after its holder was killed a
// pessimistic lock must be taken over: far below the holder's TTL (5m, the
// server's bound on an idle transaction), so only the dead connection can
// have freed it.
const pessimisticTakeoverBound = 10 * time.Second

// TestExecTakeoverAfterKill kills an exec holder with SIGKILL: its command
// dies with it, and another exec takes the name over, after the lease
// expired (optimistic, fair) or at once, as the database ends the dead
// connection's transaction (pessimistic: the holder's TTL is 5m, the taker
// gets in within seconds).
func TestExecTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		for _, m := range modes {
			t.Run(m.name, func(t *testing.T) {
				dir := t.TempDir()
				pidFile := filepath.Join(dir, "pid")
				c := cli{dsn: iso.DSN, env: []string{"DBLOCK_BIN=" + binary, "DBLOCK_TEST_DSN=" + iso.DSN}}
				lease := m.name != "pessimistic"
				ttl := "2s"
				if !lease {
					ttl = "5m"
				}
				args := append([]string{"exec", "--lock", "takeover", "--ttl", ttl}, m.flags...)
				holder := c.start(t, append(args, "--", "sh", "-c", `echo $DBLOCK_TOKEN $$ > "$1"; exec sleep 60`, "sh", pidFile)...)
				fields := strings.Fields(waitFile(t, pidFile))
				if len(fields) != 2 {
					t.Fatalf("pid file: %q", fields)
				}
				oldToken, _ := strconv.ParseInt(fields[0], 10, 64)
				childPID, _ := strconv.Atoi(fields[1])
				holder.signal(syscall.SIGKILL)
				killed := time.Now()
				if r := holder.wait(); r.code != 128+int(syscall.SIGKILL) {
					t.Fatalf("killed holder: exit %d", r.code)
				}
				if runtime.GOOS == "linux" {
					eventually(t, "the killed holder's command to die with it", func() bool { return processGone(childPID) })
				}
				var expiry time.Time
				if lease {
					rows, err := iso.Store().ListLocks(context.Background(), []string{"takeover"})
					if err != nil || len(rows) != 1 {
						t.Fatalf("ListLocks after kill: %v %v", rows, err)
					}
					expiry = rows[0].ExpiresAt
				}
				statusFile := filepath.Join(dir, "status.json")
				args = append([]string{"exec", "--lock", "takeover", "--wait", "30s"}, m.flags...)
				c.expect(t, 0, append(args, "--", "sh", "-c",
					`echo $DBLOCK_TOKEN > "$1.token"; "$DBLOCK_BIN" --dsn "$DBLOCK_TEST_DSN" status --json > "$1"`, "sh", statusFile)...)
				if took := time.Since(killed); !lease && took > pessimisticTakeoverBound {
					t.Errorf("pessimistic lock taken over %v after its holder was killed, want within %v (its TTL was 5m)", took, pessimisticTakeoverBound)
				}
				newToken, err := strconv.ParseInt(strings.TrimSpace(string(must(os.ReadFile(statusFile+".token")))), 10, 64)
				if err != nil || newToken <= oldToken {
					t.Fatalf("taker's token %d (%v), want > %d", newToken, err, oldToken)
				}
				var st statusJSON
				if err := json.Unmarshal(must(os.ReadFile(statusFile)), &st); err != nil {
					t.Fatalf("status --json from inside exec: %v", err)
				}
				if !lease {
					// The taker's own hold, seen by status from inside it.
					switch {
					case iso.Kind == store.SQLite:
						if !st.WriteLocked || len(st.Locks) != 0 || st.Checked {
							t.Errorf("status --json inside the pessimistic taker on SQLite: %+v, want write_locked", st)
						}
					case len(st.Locks) != 1 || st.Locks[0].Name != "takeover" || st.Locks[0].Mode != "pessimistic" ||
						st.Locks[0].Owner != "" || st.Locks[0].Token != nil || st.Locks[0].ExpiresAt != nil:
						t.Errorf("status --json inside the pessimistic taker: %+v", st)
					}
					return
				}
				if len(st.Locks) != 1 || st.Locks[0].Token == nil || *st.Locks[0].Token != newToken || st.Locks[0].AcquiredAt == nil {
					t.Fatalf("status --json inside the taker: %+v", st)
				}
				acquired, err := time.Parse(time.RFC3339, *st.Locks[0].AcquiredAt)
				if err != nil {
					t.Fatal(err)
				}
				if acquired.Before(expiry) {
					t.Errorf("taken over at %v, before the killed holder's lease expired at %v", acquired, expiry)
				}
			})
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestExecExitCodes provokes every exit code of exec that needs a database.
func TestExecExitCodes(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := cli{dsn: iso.DSN}
		t.Run("status passthrough", func(t *testing.T) {
			c.expect(t, 0, "exec", "--lock", "x", "--", "true")
			c.expect(t, 7, "exec", "--lock", "x", "--", "sh", "-c", "exit 7")
			c.expect(t, 128+int(syscall.SIGTERM), "exec", "--lock", "x", "--", "sh", "-c", "kill -TERM $$")
			for _, m := range modes {
				c.expect(t, 3, append(append([]string{"exec", "--lock", "x"}, m.flags...), "--", "sh", "-c", "exit 3")...)
			}
			r := c.expect(t, 0, "exec", "--lock", "env", "--owner", "me", "--", "sh", "-c", `echo "$DBLOCK_NAME|$DBLOCK_OWNER|$DBLOCK_TOKEN"`)
			if f := strings.Split(strings.TrimSpace(r.stdout), "|"); len(f) != 3 || f[0] != "env" || f[1] != "me" || f[2] == "" || f[2] == "0" {
				t.Errorf("CMD environment: %q", r.stdout)
			}
		})
		t.Run("pessimistic hold outlives its idle TTL", func(t *testing.T) {
			// The server ends a transaction idle for its TTL (rounded up:
			// 2 s on MariaDB); exec keeps the holding transaction busy
			// (every quarter of that) while CMD runs for twice the TTL,
			// and its last keep-alive, due as CMD ends, is not cut short. (A TTL far below a second would make a loaded
			// machine's scheduling pauses, not exec, decide the outcome.)
			c.expect(t, 0, "exec", "--lock", "long", "--mode", "pessimistic", "--ttl", "1500ms", "--", "sleep", "3")
		})
		t.Run("76 at the max hold", func(t *testing.T) {
			// The lease is renewed (every 200ms) until the cap, then lost:
			// CMD gets SIGTERM and exec exits 76.
			r := c.expect(t, 76, "exec", "--lock", "capped", "--ttl", "600ms", "--max-hold", "1500ms", "--", "sleep", "60")
			assertOneLine(t, r.stderr, "lease expired")
		})
		t.Run("command not found or not runnable", func(t *testing.T) {
			r := c.expect(t, 127, "exec", "--lock", "x", "--", "no-such-command-dblock-test")
			assertOneLine(t, r.stderr, `exec: "no-such-command-dblock-test": executable file not found`)
			dir := t.TempDir()
			r = cli{dsn: iso.DSN, dir: dir}.expect(t, 127, "exec", "--lock", "x", "--", "./missing")
			assertOneLine(t, r.stderr, `exec: "./missing": no such file or directory`)
			if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
				t.Fatal(err)
			}
			r = cli{dsn: iso.DSN, dir: dir}.expect(t, 126, "exec", "--lock", "x", "--", "./adir")
			assertOneLine(t, r.stderr, `exec: "./adir": is a directory`)
			notExec := filepath.Join(dir, "plain")
			if err := os.WriteFile(notExec, []byte("true\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			r = c.expect(t, 126, "exec", "--lock", "x", "--", notExec)
			assertOneLine(t, r.stderr, "permission denied")
		})
		t.Run("75 not acquired", func(t *testing.T) {
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready")
			holder := c.start(t, "exec", "--lock", "busy", "--owner", "holder-1", "--", "sh", "-c", `echo ok > "$1"; exec sleep 60`, "sh", ready)
			waitFile(t, ready)
			r := c.expect(t, 75, "exec", "--lock", "busy", "--wait", "0", "--", "true")
			assertOneLine(t, r.stderr, `"busy"`, `owner "holder-1"`, "until ", "(in ")
			r = c.expect(t, 75, "exec", "--lock", "busy", "--wait", "200ms", "--", "true")
			assertOneLine(t, r.stderr, `owner "holder-1"`, "gave up after waiting 200ms")
			r = c.expect(t, 75, "exec", "--lock", "busy", "--mode", "pessimistic", "--wait", "0", "--", "true")
			assertOneLine(t, r.stderr, `"busy"`)
			holder.signal(syscall.SIGTERM)
			if r := holder.wait(); r.code != 128+int(syscall.SIGTERM) {
				t.Errorf("holder after SIGTERM: exit %d (stderr %q)", r.code, r.stderr)
			}
			c.expect(t, 0, "exec", "--lock", "busy", "--wait", "0", "--", "true")
		})
		t.Run("76 lost", func(t *testing.T) {
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready")
			term := filepath.Join(dir, "term")
			holder := c.start(t, "exec", "--lock", "lose", "--ttl", "1s", "--", "sh", "-c",
				quietCmd+`trap 'echo term > "$2"; exit 0' TERM; echo ok > "$1"; while :; do sleep 0.05; done`, "sh", ready, term)
			waitFile(t, ready)
			r := c.expect(t, 0, "release", "--lock", "lose", "--force")
			if !strings.Contains(r.stdout, `released "lose"`) {
				t.Errorf("release output %q", r.stdout)
			}
			res := holder.wait()
			if res.code != 76 {
				t.Fatalf("holder after force release: exit %d, want 76 (stderr %q)", res.code, res.stderr)
			}
			assertOneLine(t, res.stderr, `lock "lose" lost`, "released by an administrator", "SIGTERM")
			if got := waitFile(t, term); got != "term" {
				t.Errorf("CMD did not get SIGTERM: %q", got)
			}
			r = c.expect(t, 0, "release", "--lock", "lose", "--force")
			if !strings.Contains(r.stdout, "not held") {
				t.Errorf("second release output %q", r.stdout)
			}
		})
		t.Run("signals forwarded", func(t *testing.T) {
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready")
			term := filepath.Join(dir, "term")
			got := filepath.Join(dir, "got")
			p := c.start(t, "exec", "--lock", "sig", "--", "sh", "-c", quietCmd+`trap 'echo term > "$2"; exit 3' TERM
for s in INT HUP QUIT USR1 USR2; do trap "echo $s >> \"\$3\"" $s; done
echo ok > "$1"; while :; do sleep 0.05; done`, "sh", ready, term, got)
			waitFile(t, ready)
			var want []string
			for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2} {
				name := strings.TrimPrefix(signame(sig), "SIG")
				want = append(want, name)
				p.signal(sig)
				eventually(t, "CMD to trap "+name, func() bool {
					b, _ := os.ReadFile(got)
					return strings.Join(strings.Fields(string(b)), " ") == strings.Join(want, " ")
				})
			}
			p.signal(syscall.SIGTERM)
			if r := p.wait(); r.code != 3 {
				t.Fatalf("exec after SIGTERM: exit %d, want CMD's 3 (stderr %q)", r.code, r.stderr)
			}
			if got := waitFile(t, term); got != "term" {
				t.Errorf("CMD did not get SIGTERM: %q", got)
			}
			c.expect(t, 0, "exec", "--lock", "sig", "--wait", "0", "--", "true")
			if r := p.wait(); strings.TrimSpace(r.stderr) != "" {
				t.Errorf("forwarding signals printed on stderr: %q", r.stderr)
			}
		})
		t.Run("130 interrupted while waiting", func(t *testing.T) {
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready")
			holder := c.start(t, "exec", "--lock", "intr", "--", "sh", "-c", `echo ok > "$1"; exec sleep 60`, "sh", ready)
			waitFile(t, ready)
			debug := cli{dsn: iso.DSN, env: []string{"DBLOCK_LOG=debug"}}
			for _, m := range modes {
				w := debug.start(t, append(append([]string{"exec", "--lock", "intr"}, m.flags...), "--", "echo", "never")...)
				eventually(t, m.name+" waiter to ask for the lock", func() bool {
					b, _ := os.ReadFile(w.errOut)
					return strings.Contains(string(b), acquiringLog)
				})
				w.signal(syscall.SIGINT)
				r := w.wait()
				if r.code != 128+int(syscall.SIGINT) || r.stdout != "" {
					t.Fatalf("%s waiter after SIGINT: exit %d, stdout %q, want 130 and no output (stderr %q)", m.name, r.code, r.stdout, r.stderr)
				}
				lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
				assertOneLine(t, lines[len(lines)-1], "interrupted by SIGINT while waiting", `"intr"`)
			}
			holder.signal(syscall.SIGTERM)
			holder.wait()
			// No waiter left anything behind.
			c.expect(t, 0, "exec", "--lock", "intr", "--wait", "0", "--fair", "--", "true")
		})
		t.Run("76 lease expired while dblock was stopped", func(t *testing.T) {
			for _, m := range modes {
				if m.name == "pessimistic" {
					continue // No lease: see "76 pessimistic connection killed".
				}
				dir := t.TempDir()
				ready := filepath.Join(dir, "ready")
				term := filepath.Join(dir, "term")
				holder := c.start(t, append(append([]string{"exec", "--lock", "stop-" + m.name, "--ttl", "1s"}, m.flags...), "--", "sh", "-c",
					quietCmd+`trap 'echo term > "$2"; exit 0' TERM; echo ok > "$1"; while :; do sleep 0.05; done`, "sh", ready, term)...)
				waitFile(t, ready)
				holder.signal(syscall.SIGSTOP)
				eventually(t, "the stopped holder's lease to expire by the database clock", func() bool {
					rows, err := iso.Store().ListLocks(context.Background(), []string{"stop-" + m.name})
					return err == nil && len(rows) == 1 && rows[0].Expired()
				})
				holder.signal(syscall.SIGCONT)
				r := holder.wait()
				if r.code != 76 {
					t.Fatalf("%s holder resumed after its lease expired: exit %d, want 76 (stderr %q)", m.name, r.code, r.stderr)
				}
				assertOneLine(t, r.stderr, `lock "stop-`+m.name+`" lost`, "SIGTERM")
				if got := waitFile(t, term); got != "term" {
					t.Errorf("%s: CMD did not get SIGTERM: %q", m.name, got)
				}
			}
		})
		t.Run("76 pessimistic connection killed", func(t *testing.T) {
			if iso.Kind == store.SQLite {
				t.Skip("SQLite has no server session to end")
			}
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready")
			term := filepath.Join(dir, "term")
			holder := c.start(t, "exec", "--lock", "conn", "--mode", "pessimistic", "--ttl", "5m", "--", "sh", "-c",
				quietCmd+`trap 'echo term > "$2"; exit 0' TERM; echo ok > "$1"; while :; do sleep 0.05; done`, "sh", ready, term)
			waitFile(t, ready)
			killHoldingSession(t, iso)
			r := holder.wait()
			if r.code != 76 {
				t.Fatalf("holder whose connection was killed: exit %d, want 76 (stderr %q)", r.code, r.stderr)
			}
			assertOneLine(t, r.stderr, `lock "conn" lost`, "SIGTERM")
			if got := waitFile(t, term); got != "term" {
				t.Errorf("CMD did not get SIGTERM: %q", got)
			}
			c.expect(t, 0, "exec", "--lock", "conn", "--mode", "pessimistic", "--wait", "0", "--", "true")
		})
	})
}

// killHoldingSession ends, from the server side, the one session of iso's
// database that holds a transaction with row locks on dblock_locks.
func killHoldingSession(t *testing.T, iso *dbtest.Isolated) {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	var err error
	switch iso.Kind {
	case store.Postgres:
		// A row lock's transaction holds ROW SHARE on the table.
		err = iso.Store().SelectContext(ctx, &ids, `SELECT pid FROM pg_locks
WHERE relation = 'dblock_locks'::regclass AND mode = 'RowShareLock' AND granted AND pid <> pg_backend_pid()`)
	case store.MySQL:
		err = iso.Store().SelectContext(ctx, &ids, `SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_TRX t
JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
WHERE p.DB = DATABASE() AND t.trx_rows_locked > 0 AND p.ID <> CONNECTION_ID()`)
	}
	if err != nil || len(ids) != 1 {
		t.Fatalf("find the holding session: %v %v", ids, err)
	}
	switch iso.Kind {
	case store.Postgres:
		var ok bool
		err = iso.Store().QueryRowxContext(ctx, "SELECT pg_terminate_backend($1)", ids[0]).Scan(&ok)
	case store.MySQL:
		_, err = iso.Store().ExecContext(ctx, fmt.Sprintf("KILL %d", ids[0]))
	}
	if err != nil {
		t.Fatalf("end session %d: %v", ids[0], err)
	}
}

// TestUsageErrors checks that bad usage exits 64 with one clear line.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	c := cli{}
	long := strings.Repeat("n", 300)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--bogus", "status"}, "flag provided but not defined: --bogus"},
		{[]string{"exec", "--bogus", "--lock", "x", "--", "true"}, "flag provided but not defined: --bogus"},
		{[]string{"exec", "--", "true"}, "--lock NAME is required"},
		{[]string{"exec", "--lock", "x"}, "no command given"},
		{[]string{"exec", "--lock", "x", "--mode", "sloppy", "--", "true"}, `unknown --mode "sloppy"`},
		{[]string{"exec", "--lock", "x", "--mode", "pessimistic", "--fair", "--", "true"}, "--fair works with --mode optimistic only"},
		{[]string{"exec", "--lock", "x", "--ttl", "soon", "--", "true"}, "invalid value \"soon\" for flag --ttl"},
		{[]string{"exec", "--lock", "x", "--ttl", "1ns", "--", "true"}, "ttl 1ns out of range"},
		{[]string{"exec", "--lock", "x", "--wait", "-1s", "--", "true"}, "must not be negative"},
		{[]string{"exec", "--lock", "x", "--max-hold", "1ns", "--", "true"}, "ttl 1ns out of range"},
		{[]string{"exec", "--lock", "x", "--mode", "pessimistic", "--max-hold", "1m", "--", "true"}, "--max-hold: a pessimistic hold has no lease to cap"},
		{[]string{"exec", "--lock", long, "--", "true"}, "invalid lock name"},
		{[]string{"status", long}, "invalid lock name"},
		{[]string{"release", "--lock", "x"}, "refusing to free \"x\" without --force"},
		{[]string{"release", "--force"}, "--lock NAME is required"},
		{[]string{"migrate"}, "want exactly one of up, down or status"},
		{[]string{"migrate", "sideways"}, `unknown subcommand "sideways"`},
		{[]string{"--dsn", "oracle://scott@db/x", "status"}, "bad DSN"},
		{[]string{"--dsn", "mysql://root@127.0.0.1:3306/test", "status"}, "bad DSN"},
		{[]string{"--dsn", "sqlite://", "status"}, "bad DSN"},
		{[]string{"reaper", "--schedule", "every tuesday"}, `bad --schedule "every tuesday"`},
		{[]string{"reaper", "--metrics-addr", "9090"}, `bad --metrics-addr "9090"`},
		{[]string{"help", "frobnicate"}, `help: unknown command "frobnicate"`},
	}
	for _, tc := range cases {
		r := c.expect(t, 64, tc.args...)
		assertOneLine(t, r.stderr, tc.want)
		if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic") {
			t.Errorf("dblock %v printed a stack trace: %s", tc.args, r.stderr)
		}
	}
	r := cli{env: []string{"DBLOCK_LOG=loud"}}.expect(t, 64, "status")
	assertOneLine(t, r.stderr, `bad DBLOCK_LOG "loud"`)
	r = c.expect(t, 64)
	if !strings.Contains(r.stderr, "Usage:") {
		t.Errorf("no command: stderr %q, want the usage", r.stderr)
	}
	r = c.run(t, "--dsn", "oracle://scott:tiger@db/x", "status")
	if strings.Contains(r.stderr, "tiger") {
		t.Errorf("a password leaked into the error: %q", r.stderr)
	}
}

// TestUnavailable checks the exit code of an unreachable database.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	r := cli{dsn: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"}.expect(t, 69, "status")
	assertOneLine(t, r.stderr, "database unavailable")
}

// TestHelp checks --help on every command: usage and examples on stdout, exit 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	c := cli{}
	for _, args := range [][]string{{"--help"}, {"help"}, {"migrate", "--help"}, {"exec", "--help"},
		{"status", "--help"}, {"release", "--help"}, {"reaper", "--help"}} {
		r := c.expect(t, 0, args...)
		if !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "Examples:") {
			t.Errorf("dblock %v: help without usage or examples:\n%s", args, r.stdout)
		}
	}
	// dblock help COMMAND prints what dblock COMMAND --help prints.
	for _, cmd := range []string{"migrate", "exec", "status", "release", "reaper"} {
		help, flag := c.expect(t, 0, "help", cmd), c.expect(t, 0, cmd, "--help")
		if help.stdout != flag.stdout || !strings.Contains(help.stdout, "dblock [--dsn DSN] "+cmd) {
			t.Errorf("dblock help %s:\n%s\nwant dblock %s --help:\n%s", cmd, help.stdout, cmd, flag.stdout)
		}
	}
}

// TestSchemaMissing checks that every command that needs the tables says
// which migrate command to run, and exits 78.
func TestSchemaMissing(t *testing.T) {
	t.Parallel()
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.NewEmpty(t, kind)
			c := cli{dsn: iso.DSN}
			for _, args := range [][]string{{"status"}, {"exec", "--lock", "x", "--", "true"}, {"release", "--lock", "x", "--force"}, {"reaper", "--once"}} {
				r := c.expect(t, 78, args...)
				assertOneLine(t, r.stderr, "dblock migrate up")
			}
		})
	}
}

// TestMigrateConcurrently: six `dblock migrate up` started together on one
// fresh database (replicas migrating as they start) all exit 0, between them
// apply each migration exactly once, and leave the schema complete.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.NewEmpty(t, kind)
			c := cli{dsn: iso.DSN}
			var procs []*proc
			for range 6 {
				procs = append(procs, c.start(t, "migrate", "up"))
			}
			applied := map[string]int{}
			for i, p := range procs {
				r := p.wait()
				if r.code != 0 {
					t.Errorf("migrate up %d: exit %d: %s", i, r.code, r.stderr)
				}
				for _, line := range strings.Split(r.stdout, "\n") {
					if f, ok := strings.CutPrefix(line, "applied "); ok {
						applied[f]++
					}
				}
			}
			r := c.expect(t, 0, "migrate", "status")
			if strings.Contains(r.stdout, "pending") {
				t.Fatalf("status after concurrent runs:\n%s", r.stdout)
			}
			for f, n := range applied {
				if n != 1 {
					t.Errorf("%s reported applied by %d runs, want 1", f, n)
				}
			}
			if len(applied) < 3 {
				t.Errorf("the runs reported %d migrations applied: %v", len(applied), applied)
			}
		})
	}
}

// TestMigrateRoundTrip applies, inspects and rolls back the migrations.
func TestMigrateRoundTrip(t *testing.T) {
	t.Parallel()
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.NewEmpty(t, kind)
			c := cli{dsn: iso.DSN}
			r := c.expect(t, 0, "migrate", "status")
			if !strings.Contains(r.stdout, "pending") || strings.Contains(r.stdout, "applied ") {
				t.Fatalf("status before up:\n%s", r.stdout)
			}
			r = c.expect(t, 0, "migrate", "up")
			applied := strings.Count(r.stdout, "applied ")
			if applied < 2 || !strings.Contains(r.stdout, "00001_create_dblock_locks.sql") {
				t.Fatalf("migrate up:\n%s", r.stdout)
			}
			r = c.expect(t, 0, "migrate", "up")
			if !strings.Contains(r.stdout, "up to date") {
				t.Errorf("second migrate up:\n%s", r.stdout)
			}
			r = c.expect(t, 0, "migrate", "status")
			if strings.Contains(r.stdout, "pending") || strings.Count(r.stdout, "applied") != applied {
				t.Errorf("status after up:\n%s", r.stdout)
			}
			c.expect(t, 0, "exec", "--lock", "m", "--", "true")

			r = c.expect(t, 0, "migrate", "down")
			if !strings.Contains(r.stdout, "rolled back ") {
				t.Fatalf("migrate down:\n%s", r.stdout)
			}
			r = c.expect(t, 78, "exec", "--lock", "m", "--", "true")
			assertOneLine(t, r.stderr, "dblock migrate up")
			c.expect(t, 0, "migrate", "up")
			c.expect(t, 0, "exec", "--lock", "m", "--", "true")

			for i := 0; ; i++ {
				if i > applied {
					t.Fatalf("migrate down did not reach version 0 after %d steps", i)
				}
				r = c.expect(t, 0, "migrate", "down")
				if strings.Contains(r.stdout, "nothing to roll back") {
					break
				}
			}
			r = c.expect(t, 0, "migrate", "status")
			if strings.Count(r.stdout, "pending") != applied {
				t.Errorf("status after rolling everything back:\n%s", r.stdout)
			}
			c.expect(t, 0, "migrate", "up")
			c.expect(t, 0, "exec", "--lock", "m", "--", "true")
		})
	}
}

// TestFirstRunSQLiteDefault runs the README's first command in an empty
// directory with no DSN: the SQLite default is created and migrated.
func TestFirstRunSQLiteDefault(t *testing.T) {
	t.Parallel()
	c := cli{dir: t.TempDir()}
	r := c.expect(t, 0, "exec", "--lock", "hello", "--", "echo", "I hold the lock")
	if r.stdout != "I hold the lock\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "dblock.db")); err != nil {
		t.Errorf("the default database was not created: %v", err)
	}
	r = c.expect(t, 0, "status", "--json", "hello")
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if len(st.Locks) != 0 || len(st.Free) != 1 || st.Free[0] != "hello" {
		t.Errorf("status after the run: %+v", st)
	}
	// Concurrent first runs in another empty directory all succeed.
	c2 := cli{dir: t.TempDir()}
	procs := make([]*proc, 3)
	for i := range procs {
		procs[i] = c2.start(t, "exec", "--lock", "hello", "--", "true")
	}
	for i, p := range procs {
		if r := p.wait(); r.code != 0 {
			t.Errorf("concurrent first run %d: exit %d: %s", i, r.code, r.stderr)
		}
	}
}

var metadataRE = regexp.MustCompile(`^dblock exec on \S+ pid \d+: sh$`)

// normalizeStatus replaces what differs between runs (times, durations,
// tokens, ids, host and pid) with fixed values after checking its form.
func normalizeStatus(t *testing.T, v any, key string) any {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeStatus(t, e, k)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalizeStatus(t, e, key)
		}
		return x
	case string:
		switch {
		case key == "now" || key == "waiting_since" || strings.HasSuffix(key, "_at"):
			ts, err := time.Parse(time.RFC3339, x)
			if err != nil || !strings.HasSuffix(x, "Z") || ts.Year() < 2000 {
				t.Errorf("%s = %q: want an RFC 3339 UTC time", key, x)
			}
			return "TIME"
		case key == "metadata" && x != "":
			if !metadataRE.MatchString(x) {
				t.Errorf("metadata = %q, want %v", x, metadataRE)
			}
			return "METADATA"
		}
		return x
	case float64:
		switch key {
		case "token", "id":
			if x <= 0 || x != float64(int64(x)) {
				t.Errorf("%s = %v, want a positive integer", key, x)
			}
			return 1
		case "expires_in_seconds":
			// Negative once expired; the golden file says which.
			if x < 0 {
				return -1.5
			}
			return 1.5
		case "wait_seconds":
			if x < 0 {
				t.Errorf("%s = %v, want >= 0", key, x)
			}
			return 1.5
		}
		return x
	}
	return v
}

// TestStatusJSONGolden checks status --json against testdata/status.golden.json
// (run with -update to rewrite it), and the table for people.
func TestStatusJSONGolden(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		dir := t.TempDir()
		ready := filepath.Join(dir, "ready")
		c := cli{dsn: iso.DSN}
		holder := c.start(t, "exec", "--lock", "golden-a", "--owner", "golden-owner", "--ttl", "1m", "--",
			"sh", "-c", `echo ok > "$1"; exec sleep 60`, "sh", ready)
		waitFile(t, ready)
		dbtest.AddWaiter(t, iso.DB, "golden-a", "waiter-1", time.Minute)
		dbtest.AddWaiter(t, iso.DB, "golden-a", "waiter-stale", -time.Second)
		dbtest.AddWaiter(t, iso.DB, "golden-a", "waiter-2", time.Minute)
		dbtest.AddWaiter(t, iso.DB, "golden-b", "waiter-3", time.Minute)
		expireLease(t, iso, "golden-x", "golden-expired")

		r := c.expect(t, 0, "status", "--json", "golden-a", "golden-b", "golden-free", "golden-x")
		checkGolden(t, iso, r.stdout, goldenStatus, store.Postgres)

		r = c.expect(t, 0, "status", "golden-a", "golden-b", "golden-free", "golden-x")
		for _, s := range []string{"LOCK", "golden-a", "golden-owner", "optimistic", "in ", "ago",
			"golden-x", "golden-expired", "expired ",
			"WAITING FOR", "waiter-1", "waiter-2", "waiter-3", "free: golden-free"} {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("status table lacks %q:\n%s", s, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "waiter-stale") {
			t.Errorf("status lists a stale waiter:\n%s", r.stdout)
		}
		holder.signal(syscall.SIGTERM)
		holder.wait()
		r = c.expect(t, 0, "status", "--json")
		var st statusJSON
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Locks) != 1 || st.Locks[0].Name != "golden-x" ||
			!st.Locks[0].Expired || len(st.Waiters) != 3 {
			t.Errorf("status after release: %+v (%v)", st, err)
		}
	})
}

// expireLease leaves name with a lease of owner that has expired by the
// database clock (as a crashed holder leaves it before the reaper runs).
func expireLease(t *testing.T, iso *dbtest.Isolated, name, owner string) {
	t.Helper()
	ctx := context.Background()
	res, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: "optimistic", TTL: time.Millisecond})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire %s: %+v %v", name, res, err)
	}
	eventually(t, "the lease of "+name+" to expire", func() bool {
		rows, err := iso.Store().ListLocks(ctx, []string{name})
		return err == nil && len(rows) == 1 && rows[0].Expired()
	})
}

// checkGolden compares a status --json document, normalised, with a golden
// file; with -update, the run on the dialect source writes it.
func checkGolden(t *testing.T, iso *dbtest.Isolated, out, golden string, source store.Kind) {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out)
	}
	got := must(json.MarshalIndent(normalizeStatus(t, doc, ""), "", "  "))
	got = append(got, '\n')
	if *update && iso.Kind == source {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read golden file (go test -run %s -update writes it): %v", t.Name(), err)
	}
	if string(got) != string(want) {
		t.Errorf("status --json (normalised) differs from %s:\n%s", golden, got)
	}
}

// TestPessimisticHold holds a name in pessimistic mode (a transaction, no
// owner in the row) and checks what every command makes of it: status shows
// it held (golden shape), release --force refuses with 75, and exec in every
// mode exits 75 with one line naming a pessimistic transaction.
func TestPessimisticHold(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		dir := t.TempDir()
		ready := filepath.Join(dir, "ready")
		c := cli{dsn: iso.DSN}
		holder := c.start(t, "exec", "--lock", "golden-p", "--mode", "pessimistic", "--ttl", "5m", "--",
			"sh", "-c", `echo ok > "$1"; exec sleep 120`, "sh", ready)
		waitFile(t, ready)
		sqlite := iso.Kind == store.SQLite

		// SQLite's write lock names no name: golden-p is unknown there,
		// never free.
		r := c.expect(t, 0, "status", "--json", "golden-p")
		if sqlite {
			checkGolden(t, iso, r.stdout, goldenStatusTxSQLite, store.SQLite)
		} else {
			checkGolden(t, iso, r.stdout, goldenStatusTx, store.Postgres)
		}

		r = c.expect(t, 0, "status", "--json")
		var st statusJSON
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatal(err)
		}
		if sqlite {
			if !st.WriteLocked || len(st.Locks) != 0 || st.Checked || st.UncheckedReason == nil || *st.UncheckedReason != "write_locked" {
				t.Errorf("status --json without names on SQLite: %s, want write_locked, no name, checked false", r.stdout)
			}
		} else if len(st.Locks) != 1 || st.Locks[0].Name != "golden-p" || st.Locks[0].Mode != "pessimistic" || st.Locks[0].Token != nil || !st.Checked {
			t.Errorf("status --json without names: %s", r.stdout)
		}

		r = c.expect(t, 0, "status", "golden-p")
		want := []string{"golden-p", "pessimistic", "(a transaction)", "when its transaction ends"}
		if sqlite {
			want = []string{"database write-locked by a transaction", "no locks held",
				"\nunknown: golden-p (not checked for a transaction hold: the database is write-locked by a transaction"}
		}
		for _, s := range want {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("status table lacks %q:\n%s", s, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "free") {
			t.Errorf("status table calls the held name free:\n%s", r.stdout)
		}

		r = c.expect(t, 75, "release", "--lock", "golden-p", "--force")
		if sqlite {
			assertOneLine(t, r.stderr, `"golden-p"`, "write-locked by a transaction", "nothing released")
		} else {
			assertOneLine(t, r.stderr, `"golden-p" is held by a transaction`, "nothing released")
		}

		for _, m := range modes {
			for _, wait := range []string{"0", "1s"} {
				r := c.expect(t, 75, append(append([]string{"exec", "--lock", "golden-p", "--wait", wait}, m.flags...), "--", "echo", "never")...)
				parts := []string{`"golden-p" is held by a pessimistic transaction`}
				if sqlite {
					parts = append(parts, "write-locked by a transaction")
				}
				if wait != "0" {
					parts = append(parts, "gave up after waiting 1s")
				}
				assertOneLine(t, r.stderr, parts...)
				if r.stdout != "" {
					t.Errorf("%s --wait %s ran CMD: %q", m.name, wait, r.stdout)
				}
			}
		}

		holder.signal(syscall.SIGTERM)
		if r := holder.wait(); r.code != 128+int(syscall.SIGTERM) {
			t.Errorf("holder after SIGTERM: exit %d (stderr %q)", r.code, r.stderr)
		}
		r = c.expect(t, 0, "status", "--json", "golden-p")
		st = statusJSON{}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.WriteLocked || len(st.Locks) != 0 || len(st.Free) != 1 ||
			!st.Checked || len(st.Unknown) != 0 {
			t.Errorf("status after the holder ended: %s (%v)", r.stdout, err)
		}
	})
}

// TestReaper runs one pass that frees an expired lease and deletes a dead
// waiter, then the scheduled reaper with metrics, stopped by SIGTERM.
func TestReaper(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		res, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: "reap-me", Owner: "gone", Mode: "optimistic", TTL: 10 * time.Millisecond})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire: %+v %v", res, err)
		}
		dbtest.AddWaiter(t, iso.DB, "reap-me", "dead-waiter", -time.Minute)
		eventually(t, "the lease to expire", func() bool {
			rows, err := iso.Store().ListLocks(ctx, []string{"reap-me"})
			return err == nil && len(rows) == 1 && rows[0].Expired()
		})
		c := cli{dsn: iso.DSN}
		r := c.expect(t, 0, "reaper", "--once")
		if !strings.Contains(r.stdout, "freed 1 expired leases, deleted 1 dead waiters") {
			t.Errorf("reaper --once output %q", r.stdout)
		}
		rows, err := iso.Store().ListLocks(ctx, nil)
		if err != nil || len(rows) != 0 {
			t.Errorf("locks after the pass: %+v %v", rows, err)
		}

		p := c.start(t, "reaper", "--schedule", "@every 1s", "--metrics-addr", "127.0.0.1:0")
		addrRE := regexp.MustCompile(`addr=http://(127\.0\.0\.1:\d+)`)
		var addr string
		eventually(t, "the metrics address in the log", func() bool {
			b, _ := os.ReadFile(p.errOut)
			if m := addrRE.FindSubmatch(b); m != nil {
				addr = string(m[1])
				return true
			}
			return false
		})
		client := &http.Client{Timeout: 10 * time.Second}
		get := func(path string) (int, string) {
			t.Helper()
			resp, err := client.Get("http://" + addr + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := get("/healthz"); code != http.StatusOK || !strings.Contains(body, "ok") {
			t.Errorf("/healthz: %d %q", code, body)
		}
		if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "dblock_reaper_rows_total") {
			t.Errorf("/metrics: %d %q", code, body)
		}
		p.signal(syscall.SIGTERM)
		if r := p.wait(); r.code != 0 {
			t.Errorf("reaper after SIGTERM: exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// TestExecFairQueue queues fair exec waiters behind a holder: status shows
// them in arrival order, an interrupted waiter leaves the queue (exit 130),
// and the others run in arrival order once the holder ends.
func TestExecFairQueue(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		dir := t.TempDir()
		ready, goFile, order := filepath.Join(dir, "ready"), filepath.Join(dir, "go"), filepath.Join(dir, "order")
		c := cli{dsn: iso.DSN}
		holder := c.start(t, "exec", "--lock", "fq", "--fair", "--", "sh", "-c",
			`echo ok > "$1"; while [ ! -f "$2" ]; do sleep 0.05; done`, "sh", ready, goFile)
		waitFile(t, ready)
		queued := func(n int) {
			t.Helper()
			eventually(t, fmt.Sprintf("%d fair waiters", n), func() bool {
				w, err := iso.Store().ListWaiters(ctx, []string{"fq"})
				return err == nil && len(w) == n
			})
		}
		var waiters []*proc
		for i, owner := range []string{"w1", "w2", "w3"} {
			waiters = append(waiters, c.start(t, "exec", "--lock", "fq", "--fair", "--owner", owner, "--",
				"sh", "-c", `echo "$DBLOCK_OWNER" >> "$1"`, "sh", order))
			queued(i + 1)
		}
		waiters[2].signal(syscall.SIGINT)
		r := waiters[2].wait()
		if r.code != 128+int(syscall.SIGINT) {
			t.Fatalf("interrupted waiter: exit %d, want 130 (stderr %q)", r.code, r.stderr)
		}
		assertOneLine(t, r.stderr, "interrupted by SIGINT", `"fq"`)
		queued(2)

		r = c.expect(t, 0, "status", "--json", "fq")
		var st statusJSON
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Locks) != 1 || st.Locks[0].Mode != "fair" || len(st.Waiters) != 2 ||
			st.Waiters[0].Owner != "w1" || st.Waiters[0].Position != 1 ||
			st.Waiters[1].Owner != "w2" || st.Waiters[1].Position != 2 {
			t.Fatalf("status --json with two fair waiters: %s", r.stdout)
		}

		if err := os.WriteFile(goFile, []byte("go"), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := holder.wait(); r.code != 0 {
			t.Fatalf("holder: exit %d (%q)", r.code, r.stderr)
		}
		for i, w := range waiters[:2] {
			if r := w.wait(); r.code != 0 {
				t.Fatalf("waiter %d: exit %d (%q)", i+1, r.code, r.stderr)
			}
		}
		if got := strings.Join(readLines(t, order), " "); got != "w1 w2" {
			t.Errorf("fair waiters ran in order %q, want \"w1 w2\"", got)
		}
	})
}

// TestStatusReadOnlyRole runs status as a role that may only read the dblock
// tables while a pessimistic transaction holds a name. MariaDB lets such a
// role take the shared lock of the probe, so the hold is shown; PostgreSQL
// wants UPDATE for any locking read, so status shows the leases, says on
// one stderr line that transaction holds are not shown, and reports every
// name asked for that no live lease holds as unknown, never free.
func TestStatusReadOnlyRole(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			roDSN := readOnlyRole(t, iso)
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready")
			c := cli{dsn: iso.DSN}
			holder := c.start(t, "exec", "--lock", "ro-p", "--mode", "pessimistic", "--ttl", "5m", "--",
				"sh", "-c", `echo ok > "$1"; exec sleep 120`, "sh", ready)
			waitFile(t, ready)
			expireLease(t, iso, "ro-x", "someone")
			expireLease(t, iso, "ro-free", "someone")
			if _, err := iso.Store().ForceRelease(context.Background(), nil, "ro-free"); err != nil {
				t.Fatal(err) // A free row, as a released lock leaves it.
			}
			ro := cli{dsn: roDSN}
			denied := kind == store.Postgres

			r := ro.expect(t, 0, "status", "--json")
			var st statusJSON
			if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
				t.Fatalf("status --json as a read-only role: %v\n%s", err, r.stdout)
			}
			names := []string{}
			for _, l := range st.Locks {
				names = append(names, l.Name+"/"+l.Mode)
			}
			if denied {
				assertOneLine(t, r.stderr, "status: transaction (pessimistic) holds not shown", "grant it UPDATE")
				if strings.Join(names, " ") != "ro-x/optimistic" || st.Checked || st.UncheckedReason == nil ||
					*st.UncheckedReason != "permission_denied" || len(st.Unknown) != 0 {
					t.Errorf("status --json as a read-only role: %s, want the expired lease only, checked false (permission_denied)", r.stdout)
				}
			} else {
				if r.stderr != "" {
					t.Errorf("stderr %q", r.stderr)
				}
				if strings.Join(names, " ") != "ro-p/pessimistic ro-x/optimistic" || !st.Checked || st.UncheckedReason != nil {
					t.Errorf("status --json as a read-only role: %s, want the pessimistic hold and the expired lease, checked", r.stdout)
				}
			}

			// Named: the held name, one with an expired lease, a free row
			// and a name without a row.
			asked := []string{"ro-p", "ro-x", "ro-free", "ro-none"}
			r = ro.expect(t, 0, append([]string{"status", "--json"}, asked...)...)
			if denied {
				checkGolden(t, iso, r.stdout, goldenStatusDenied, store.Postgres)
			} else {
				st = statusJSON{}
				if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || !st.Checked || len(st.Unknown) != 0 ||
					strings.Join(st.Free, " ") != "ro-free ro-none" || len(st.Locks) != 2 || st.Locks[0].Name != "ro-p" {
					t.Errorf("status --json %v as a read-only role on MariaDB: %s (%v)", asked, r.stdout, err)
				}
			}
			r = ro.expect(t, 0, append([]string{"status"}, asked...)...)
			if denied {
				for _, s := range []string{"ro-x", "expired ", "(transaction holds not checked: this role may not lock rows of dblock_locks",
					"\nunknown: ro-p, ro-x, ro-free, ro-none (not checked for a transaction hold: "} {
					if !strings.Contains(r.stdout, s) {
						t.Errorf("status table as a read-only role lacks %q:\n%s", s, r.stdout)
					}
				}
				if strings.Contains(r.stdout, "free:") {
					t.Errorf("status table calls names it could not check free:\n%s", r.stdout)
				}
			} else if !strings.Contains(r.stdout, "\nfree: ro-free, ro-none\n") || strings.Contains(r.stdout, "unknown") {
				t.Errorf("status table as a read-only role on MariaDB:\n%s", r.stdout)
			}
			holder.signal(syscall.SIGTERM)
			holder.wait()
		})
	}
}

// TestStatusReadOnlySession runs status on a PostgreSQL session whose
// transactions are read-only (as on a standby): the probe's locking read is
// refused, so the names asked for that no live lease holds are unknown.
func TestStatusReadOnlySession(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	u, err := url.Parse(iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_transaction_read_only", "on")
	u.RawQuery = q.Encode()
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	holder := cli{dsn: iso.DSN}.start(t, "exec", "--lock", "rs-p", "--mode", "pessimistic", "--ttl", "5m", "--",
		"sh", "-c", `echo ok > "$1"; exec sleep 120`, "sh", ready)
	waitFile(t, ready)

	r := cli{dsn: u.String()}.expect(t, 0, "status", "--json", "rs-p", "rs-none")
	assertOneLine(t, r.stderr, "status: transaction (pessimistic) holds not shown: the session is read-only")
	var st statusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Checked || st.UncheckedReason == nil || *st.UncheckedReason != "read_only" ||
		len(st.Free) != 0 || len(st.Unknown) != 2 || st.Unknown[0] != (unknownJSON{Name: "rs-p", Reason: "read_only"}) {
		t.Errorf("status --json on a read-only session: %s (%v)", r.stdout, err)
	}
	holder.signal(syscall.SIGTERM)
	holder.wait()
}

// readOnlyRole creates a login that may only read iso's tables (dropped at
// cleanup) and returns iso's DSN for it.
func readOnlyRole(t *testing.T, iso *dbtest.Isolated) string {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("dbt_ro_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	// A password, so the login works whatever the server's host-based
	// authentication asks of roles other than the superuser (a fresh Debian
	// PostgreSQL asks for scram-sha-256).
	password := fmt.Sprintf("pw%d", time.Now().UnixNano())
	admin := iso.DB // Connected as the server's superuser.
	var stmts, drop []string
	var dsn string
	switch iso.Kind {
	case store.Postgres:
		u, err := url.Parse(iso.DSN)
		if err != nil {
			t.Fatal(err)
		}
		schema := u.Query().Get("search_path")
		stmts = []string{"CREATE ROLE " + role + " LOGIN PASSWORD '" + password + "'", "GRANT USAGE ON SCHEMA " + schema + " TO " + role,
			"GRANT SELECT ON ALL TABLES IN SCHEMA " + schema + " TO " + role}
		drop = []string{"DROP OWNED BY " + role, "DROP ROLE " + role}
		u.User = url.UserPassword(role, password)
		dsn = u.String()
	case store.MySQL:
		rest := strings.TrimPrefix(iso.DSN, "mysql://")
		at, slash := strings.Index(rest, "@"), strings.LastIndex(rest, "/")
		if at < 0 || slash < at {
			t.Fatalf("unexpected MySQL DSN %q", store.Redact(iso.DSN))
		}
		database := rest[slash+1:]
		if i := strings.IndexByte(database, '?'); i >= 0 {
			database = database[:i]
		}
		stmts = []string{"CREATE USER '" + role + "'@'%' IDENTIFIED BY '" + password + "'", "GRANT SELECT ON `" + database + "`.* TO '" + role + "'@'%'"}
		drop = []string{"DROP USER '" + role + "'@'%'"}
		dsn = "mysql://" + role + ":" + password + rest[at:]
	}
	t.Cleanup(func() {
		for _, q := range drop {
			if _, err := admin.SQL().ExecContext(context.WithoutCancel(ctx), q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	for _, q := range stmts {
		if _, err := admin.SQL().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return dsn
}

// TestCLISurface: --dsn after the command, --version, and exec's metadata,
// which holds CMD's program name only unless --metadata-args asks for its
// arguments (they can hold secrets).
func TestCLISurface(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	c := cli{}
	r := c.expect(t, 0, "--version")
	if !strings.HasPrefix(r.stdout, "dblock ") || !strings.Contains(r.stdout, "go1.") {
		t.Errorf("--version: %q", r.stdout)
	}
	if r2 := c.expect(t, 0, "version"); r2.stdout != r.stdout {
		t.Errorf("version %q, --version %q", r2.stdout, r.stdout)
	}
	for _, withArgs := range []bool{false, true} {
		dir := t.TempDir()
		ready, goFile := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
		args := []string{"exec", "--dsn", iso.DSN, "--lock", "meta", "--"}
		if withArgs {
			args = []string{"exec", "--dsn", iso.DSN, "--metadata-args", "--lock", "meta", "--"}
		}
		args = append(args, "sh", "-c", `echo ok > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done`, "sh", ready, goFile)
		holder := c.start(t, args...)
		waitFile(t, ready)
		r := c.expect(t, 0, "status", "--json", "--dsn", iso.DSN, "meta")
		var st statusJSON
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Locks) != 1 {
			t.Fatalf("status --json after the command's --dsn: %v\n%s", err, r.stdout)
		}
		md := st.Locks[0].Metadata
		if hasArgs := strings.Contains(md, "echo ok"); hasArgs != withArgs || !strings.Contains(md, ": sh") {
			t.Errorf("metadata with --metadata-args %v: %q", withArgs, md)
		}
		if err := os.WriteFile(goFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if r := holder.wait(); r.code != 0 {
			t.Fatalf("holder: exit %d: %s", r.code, r.stderr)
		}
	}
}
