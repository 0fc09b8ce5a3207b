package history_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/history"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/reaper"
)

// TestDisableListPrune: a disabled history records nothing and keeps its
// entries; List's limit returns the newest; Prune and the reaper delete the
// entries past a retention.
func TestDisableListPrune(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := newCheck(t, iso)
		if c == nil {
			return
		}
		name := locktest.RandomName("list")
		var last dblock.Token
		for range 3 {
			lease, err := c.opt.Acquire(c.ctx, name)
			must(t, err)
			must(t, lease.Release(c.ctx))
			last = lease.Token()
		}
		es, err := history.List(c.ctx, iso.DB, history.Query{Name: name, Limit: 1, Since: time.Hour})
		must(t, err)
		if len(es) != 1 || es[0].Token != last {
			t.Fatalf("Limit 1: %+v, want the newest entry (token %d)", es, last)
		}
		must(t, history.Disable(c.ctx, iso.DB))
		if on, err := history.Enabled(c.ctx, iso.DB); err != nil || on {
			t.Fatalf("Enabled after Disable: %v %v", on, err)
		}
		lease, err := c.opt.Acquire(c.ctx, name)
		must(t, err)
		must(t, lease.Release(c.ctx))
		if es, err := history.List(c.ctx, iso.DB, history.Query{Name: name}); err != nil || len(es) != 3 {
			t.Fatalf("after Disable: %d entries (%v), want the 3 recorded before", len(es), err)
		}
		time.Sleep(2 * time.Millisecond) // so that every entry ended over a millisecond ago
		r, err := reaper.New(iso.DB, &reaper.Config{HistoryRetention: time.Millisecond})
		must(t, err)
		st, err := r.RunOnce(c.ctx)
		must(t, err)
		if st.HistoryPruned != 3 {
			t.Errorf("the reaper pruned %d entries, want 3", st.HistoryPruned)
		}
		if n, err := history.Prune(c.ctx, iso.DB, time.Millisecond); err != nil || n != 0 {
			t.Errorf("Prune after the reaper's: %d (%v), want 0", n, err)
		}
	})
}

// TestBadInput: bad queries and retentions are refused with
// dblock.ErrInvalidOption or ErrInvalidName.
func TestBadInput(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, dbtest.Kinds[len(dbtest.Kinds)-1])
	ctx := context.Background()
	for _, q := range []history.Query{{Since: -time.Second}, {Limit: -1}, {Limit: history.LimitMax + 1}} {
		if _, err := history.List(ctx, iso.DB, q); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("List(%+v): %v, want ErrInvalidOption", q, err)
		}
	}
	if _, err := history.List(ctx, iso.DB, history.Query{Name: strings.Repeat("x", dblock.MaxNameLen+1)}); !errors.Is(err, dblock.ErrInvalidName) {
		t.Errorf("List of an over-long name: %v, want ErrInvalidName", err)
	}
	if _, err := history.Prune(ctx, iso.DB, 0); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("Prune(0): %v, want ErrInvalidOption", err)
	}
	if err := history.Enable(ctx, nil); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("Enable(nil): %v, want ErrInvalidOption", err)
	}
	if _, err := reaper.New(iso.DB, &reaper.Config{HistoryRetention: -time.Second}); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("reaper with a negative history retention: %v, want ErrInvalidOption", err)
	}
}

// childEnv names the lock a child process holds until it is killed.
const childEnv = "DBLOCK_HISTORY_CHILD"

// childMain, in a child process, holds a lease (TTL 1 s) on the name in
// childEnv ("dsn\tname\towner"), says "held", and waits to be killed.
func childMain() {
	v := os.Getenv(childEnv)
	if v == "" {
		return
	}
	parts := strings.Split(v, "\t")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	db, err := dialect.Open(ctx, parts[0])
	if err == nil {
		var l *optimistic.Locker
		if l, err = optimistic.New(db, nil); err == nil {
			_, err = l.Acquire(ctx, parts[1], dblock.WithOwner(parts[2]), dblock.WithTTL(time.Second))
		}
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("held")
	<-ctx.Done() // killed long before
	os.Exit(2)
}

// TestKilledHolder: a holder killed with SIGKILL leaves its row; the reaper
// frees it at expiry, and the entry says it expired.
func TestKilledHolder(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := newCheck(t, iso)
		if c == nil {
			return
		}
		name := locktest.RandomName("killed")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+iso.DSN+"\t"+name+"\tchild")
		out, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "held" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("child: %q", line)
		}
		must(t, cmd.Process.Kill())
		_ = cmd.Wait()
		iso.WaitExpired(t, c.ctx, name)
		r, err := reaper.New(iso.DB, nil)
		must(t, err)
		_, err = r.RunOnce(c.ctx)
		must(t, err)
		e := c.only(name)
		if e.Ended != history.Expired || e.Owner != "child" {
			t.Errorf("entry of the killed holder: %+v, want expired, owner child", e)
		}
	})
}

// TestEnabledByAnotherPool: a pool that did not enable the history (another
// process) meets the trigger unannounced; its acquisitions still get their
// tokens, its refusals still name the holder, and every end is recorded.
func TestEnabledByAnotherPool(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		c := newCheck(t, iso)
		if c == nil {
			return
		}
		name := locktest.RandomName("other-pool")
		var last dblock.Token
		for i, owner := range []string{"a", "b"} {
			l, err := optimistic.New(iso.Open(t), nil)
			must(t, err)
			defer l.Close()
			// The first acquisition inserts the row, the second updates it
			// (the trigger fires there).
			lease, err := l.TryAcquire(c.ctx, name, dblock.WithOwner(owner))
			must(t, err)
			if lease.Token() <= last {
				t.Fatalf("acquisition %d: token %d after %d", i+1, lease.Token(), last)
			}
			last = lease.Token()
			rival, err := optimistic.New(iso.Open(t), nil)
			must(t, err)
			defer rival.Close()
			_, err = rival.TryAcquire(c.ctx, name, dblock.WithOwner("rival"))
			var held *dblock.HeldError
			if !errors.As(err, &held) || held.Owner != owner {
				t.Fatalf("a rival's TryAcquire while %s holds: %v, want held by %s", owner, err, owner)
			}
			must(t, lease.Release(c.ctx))
			c.want(c.list(name)[0], history.Released, owner, lease.Token(), dblock.ModeOptimistic)
		}
	})
}

// list returns the entries of name, newest first.
func (c *check) list(name string) []history.Entry {
	c.t.Helper()
	es, err := history.List(c.ctx, c.iso.DB, history.Query{Name: name})
	must(c.t, err)
	if len(es) == 0 {
		c.t.Fatalf("%q: no entries", name)
	}
	return es
}
