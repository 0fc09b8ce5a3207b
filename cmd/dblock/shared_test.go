package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// exec --read shares a name among readers and keeps writers out; exec
// --semaphore lets at most --limit permits out; status shows both.
func TestExecShared(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := cli{dsn: iso.DSN}
		dir := t.TempDir()
		hold := func(ready string, flags ...string) *proc {
			args := append([]string{"exec"}, flags...)
			args = append(args, "--", "sh", "-c", `echo ok > "$1"; exec sleep 60`, "sh", ready)
			p := c.start(t, args...)
			waitFile(t, ready)
			return p
		}
		r1 := hold(filepath.Join(dir, "r1"), "--lock", "catalog", "--read", "--owner", "reader-1")
		r2 := hold(filepath.Join(dir, "r2"), "--lock", "catalog", "--read", "--owner", "reader-2")
		c.expect(t, 0, "exec", "--lock", "catalog", "--read", "--wait", "0", "--", "true")
		r := c.expect(t, exitNotAcquired, "exec", "--lock", "catalog", "--wait", "0", "--", "true")
		assertOneLine(t, r.stderr, `"catalog" is held by readers`)

		g1 := hold(filepath.Join(dir, "g1"), "--lock", "api", "--semaphore", "--limit", "3", "--permits", "2")
		r = c.expect(t, exitNotAcquired, "exec", "--lock", "api", "--semaphore", "--limit", "3", "--permits", "2", "--wait", "0", "--", "true")
		assertOneLine(t, r.stderr, "2 of 3 permits out, 2 asked")
		c.expect(t, 0, "exec", "--lock", "api", "--semaphore", "--limit", "3", "--wait", "0", "--", "true")
		r = c.expect(t, exitUsage, "exec", "--lock", "api", "--semaphore", "--limit", "4", "--wait", "0", "--", "true")
		assertOneLine(t, r.stderr, "its limit is 3, not 4")

		r = c.expect(t, 0, "status", "--json", "catalog", "api")
		var st statusJSON
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Locks) != 1 || st.Locks[0].Mode != dblock.ModeRead || st.Locks[0].Owner != "" ||
			len(st.Readers) != 2 || st.Readers[0].Owner != "reader-1" || st.Readers[1].Owner != "reader-2" ||
			len(st.Permits) != 1 || st.Permits[0].Permits != 2 || len(st.Free) != 0 {
			t.Errorf("status: %s", r.stdout)
		}
		r = c.expect(t, 0, "status", "--json", "catalog")
		st = statusJSON{}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Readers) != 2 || len(st.Permits) != 0 {
			t.Errorf("status of catalog alone: %s", r.stdout)
		}
		r = c.expect(t, 0, "status")
		for _, s := range []string{"(readers)", "READING", "reader-1", "SEMAPHORE", "api"} {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("status table lacks %q:\n%s", s, r.stdout)
			}
		}
		for _, p := range []*proc{r1, r2, g1} {
			p.signal(syscall.SIGTERM)
			p.wait()
		}
		c.expect(t, 0, "exec", "--lock", "catalog", "--wait", "0", "--", "true")
	})
}

// exec --semaphore --fair waits in arrival order: a fair request behind a
// queued large one is refused with a permit free, a non-fair one is not
// held back, and the large one runs once the holder is gone.
func TestExecFairSemaphore(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := cli{dsn: iso.DSN}
		dir := t.TempDir()
		sem := []string{"exec", "--lock", "jobs", "--semaphore", "--limit", "4"}
		holder := c.start(t, append(sem, "--permits", "3", "--", "sh", "-c", `echo ok > "$1"; exec sleep 60`, "sh", filepath.Join(dir, "held"))...)
		waitFile(t, filepath.Join(dir, "held"))
		large := c.start(t, append(sem, "--permits", "4", "--fair", "--wait", "1m", "--", "sh", "-c", `echo ran > "$1"`, "sh", filepath.Join(dir, "large"))...)
		dbtest.UntilQueued(t, iso, "jobs", store.WaitSemaphore, 1)
		r := c.expect(t, exitNotAcquired, append(sem, "--fair", "--wait", "0", "--", "true")...)
		assertOneLine(t, r.stderr, "1 fair waiter queued")
		c.expect(t, 0, append(sem, "--wait", "0", "--", "true")...)
		holder.signal(syscall.SIGTERM)
		holder.wait()
		if r := large.wait(); r.code != 0 {
			t.Fatalf("large request: exit %d: %s", r.code, r.stderr)
		}
		waitFile(t, filepath.Join(dir, "large"))
	})
}

// exec --read --mode pessimistic holds the row in share mode: a second one
// runs beside it (one writer on SQLite: refused there), an exclusive one is
// refused.
func TestExecPessimisticShared(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := cli{dsn: iso.DSN}
		dir := t.TempDir()
		shared := []string{"exec", "--lock", "report", "--read", "--mode", "pessimistic"}
		p := c.start(t, append(shared, "--", "sh", "-c", `echo ok > "$1"; exec sleep 60`, "sh", filepath.Join(dir, "held"))...)
		waitFile(t, filepath.Join(dir, "held"))
		second := 0
		if iso.Kind == store.SQLite {
			second = exitNotAcquired
		}
		c.expect(t, second, append(shared, "--wait", "0", "--", "true")...)
		c.expect(t, exitNotAcquired, "exec", "--lock", "report", "--mode", "pessimistic", "--wait", "0", "--", "true")
		c.expect(t, exitNotAcquired, "exec", "--lock", "report", "--wait", "0", "--", "true")
		p.signal(syscall.SIGTERM)
		p.wait()
		c.expect(t, 0, "exec", "--lock", "report", "--mode", "pessimistic", "--wait", "0", "--", "true")
	})
}

func TestExecSharedUsage(t *testing.T) {
	t.Parallel()
	c := cli{dsn: "sqlite://" + filepath.Join(t.TempDir(), "u.db")}
	for _, args := range [][]string{
		{"--read", "--semaphore", "--limit", "2"},
		{"--semaphore"},
		{"--semaphore", "--limit", "2", "--permits", "3"},
		{"--limit", "2"},
		{"--read", "--mode", "pessimistic", "--fair"},
		{"--semaphore", "--limit", "2", "--mode", "pessimistic"},
	} {
		all := append(append([]string{"exec", "--lock", "x"}, args...), "--", "true")
		c.expect(t, exitUsage, all...)
	}
}
