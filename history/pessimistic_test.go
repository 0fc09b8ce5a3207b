package history_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/history"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// pessimistic: a hold writes no row, so its Locker writes the entry (in the
// background): one per hold when it commits or rolls back (a re-entry adds
// none), by the database's clock, with the hold's owner and token.
func (c *check) pessimistic() {
	l, err := pessimistic.New(c.iso.DB, nil)
	must(c.t, err)
	defer l.Close()
	name := locktest.RandomName("pessimistic")
	outer, err := l.Acquire(c.ctx, name, dblock.WithOwner("p1"), dblock.WithToken())
	must(c.t, err)
	inner, err := l.Acquire(c.ctx, name, dblock.WithOwner("p1"))
	must(c.t, err)
	must(c.t, inner.Release(c.ctx))
	if es, err := history.List(c.ctx, c.iso.DB, history.Query{Name: name}); err != nil || len(es) != 0 {
		c.t.Fatalf("after the inner release of a re-entered hold: %d entries (%v), want none", len(es), err)
	}
	must(c.t, outer.Commit(c.ctx))
	c.want(c.eventually(name), history.Released, "p1", outer.Token(), dblock.ModePessimistic)

	rolled := locktest.RandomName("pessimistic-rollback")
	lease, err := l.Acquire(c.ctx, rolled, dblock.WithOwner("p2"), dblock.WithToken())
	must(c.t, err)
	must(c.t, lease.Rollback(c.ctx))
	c.want(c.eventually(rolled), history.Released, "p2", lease.Token(), dblock.ModePessimistic)

	// A shared hold's entry is a read.
	shared := locktest.RandomName("pessimistic-shared")
	lease, err = l.AcquireShared(c.ctx, shared, dblock.WithOwner("p3"))
	must(c.t, err)
	must(c.t, lease.Release(c.ctx))
	c.want(c.eventually(shared), history.Released, "p3", 0, dblock.ModeRead)
}

// TestPessimisticConnectionLost: a hold whose session the server ends is
// lost, and its entry says connection_lost.
func TestPessimisticConnectionLost(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		if iso.Kind == store.SQLite {
			t.Skip("SQLite runs in-process: no session to end from the server")
		}
		c := newCheck(t, iso)
		if c == nil {
			return
		}
		l, err := pessimistic.New(iso.DB, &pessimistic.Config{WatchInterval: 20 * time.Millisecond})
		must(t, err)
		defer l.Close()
		name := locktest.RandomName("conn-lost")
		lease, err := l.Acquire(c.ctx, name, dblock.WithOwner("p3"), dblock.WithToken())
		must(t, err)
		iso.KillSession(t, c.ctx, iso.SessionID(t, c.ctx, lease.Tx()))
		<-lease.Done()
		if !errors.Is(lease.Err(), dblock.ErrConnLost) {
			t.Fatalf("lease after its session ended: %v, want ErrConnLost", lease.Err())
		}
		_ = lease.Release(c.ctx)
		c.want(c.eventually(name), history.ConnectionLost, "p3", lease.Token(), dblock.ModePessimistic)
	})
}

// TestPessimisticAborted: on MySQL and MariaDB the server rolls a deadlock
// victim's transaction back by itself; the hold is lost when its commit
// finds that out, and its entry says aborted.
func TestPessimisticAborted(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		if iso.Kind != store.MySQL {
			t.Skipf("only MySQL and MariaDB end a deadlock victim's transaction by themselves (%s: its holder rolls it back, an entry that says released)", iso.Kind)
		}
		c := newCheck(t, iso)
		if c == nil {
			return
		}
		_, err := iso.Store().ExecContext(c.ctx, "CREATE TABLE h_acct (id INT PRIMARY KEY, n INT NOT NULL)")
		must(t, err)
		_, err = iso.Store().ExecContext(c.ctx, "INSERT INTO h_acct (id, n) VALUES (1, 0), (2, 0)")
		must(t, err)
		l, err := pessimistic.New(iso.DB, nil)
		must(t, err)
		defer l.Close()
		names := []string{locktest.RandomName("victim-a"), locktest.RandomName("victim-b")}
		leases := make([]*pessimistic.Lease, 2)
		for i, n := range names {
			leases[i], err = l.Acquire(c.ctx, n, dblock.WithOwner(fmt.Sprintf("p%d", i)), dblock.WithToken())
			must(t, err)
			_, err = leases[i].Tx().ExecContext(c.ctx, "UPDATE h_acct SET n = n + 1 WHERE id = ?", i+1)
			must(t, err)
		}
		// Each now updates the other's row: one of them is the victim.
		errs := make(chan error, 2)
		for i, lease := range leases {
			go func() {
				_, err := lease.Tx().ExecContext(c.ctx, "UPDATE h_acct SET n = n + 1 WHERE id = ?", 2-i)
				if err == nil {
					err = lease.Commit(c.ctx)
				} else {
					err = lease.Commit(c.ctx) // The victim's: finds the transaction ended.
					if err == nil {
						err = errors.New("the victim's commit succeeded")
					} else {
						err = nil
					}
				}
				errs <- err
			}()
		}
		for range leases {
			must(t, <-errs)
		}
		aborted := 0
		for i, n := range names {
			e := c.eventually(n)
			switch e.Ended {
			case history.Aborted:
				aborted++
			case history.Released:
			default:
				t.Errorf("%q: ended %q, want aborted or released", n, e.Ended)
			}
			c.want(e, e.Ended, fmt.Sprintf("p%d", i), leases[i].Token(), dblock.ModePessimistic)
		}
		if aborted != 1 {
			t.Errorf("%d holds aborted, want the deadlock's one victim", aborted)
		}
	})
}

// eventually returns the one entry of name once it is written (a loss's
// entry is written in the background), failing after hangGuard.
func (c *check) eventually(name string) history.Entry {
	c.t.Helper()
	for deadline := time.Now().Add(hangGuard); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		es, err := history.List(c.ctx, c.iso.DB, history.Query{Name: name})
		must(c.t, err)
		if len(es) > 0 {
			return c.only(name)
		}
	}
	c.t.Fatalf("%q: no entry after %v", name, hangGuard)
	return history.Entry{}
}
