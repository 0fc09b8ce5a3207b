package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// killer ends a client's connections server-side.
type killer struct {
	kind store.Kind
	adm  *dialect.DB
	// tag identifies the victim's sessions, and only them: its
	// application_name on PostgreSQL, its own account on MariaDB.
	tag string
}

// holderDB opens a second pool on iso's database whose sessions a killer can
// find, and the killer. On MariaDB the pool logs in as an account of its
// own (every privilege on the isolated database), so the killer never
// touches another pool's sessions (a rival's, the test's own).
func holderDB(t *testing.T, iso *dbtest.Isolated) (*dialect.DB, *killer) {
	t.Helper()
	switch iso.Kind {
	case store.Postgres:
		tag := "faults_" + randHex(6)
		u, err := url.Parse(iso.DSN)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", tag)
		u.RawQuery = q.Encode()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		db, err := dialect.Open(ctx, u.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db, &killer{kind: iso.Kind, adm: iso.DB, tag: tag}
	case store.MySQL:
		if !strings.HasPrefix(iso.DSN, "mysql://root@tcp(127.0.0.1:") {
			ciRequired(t, "the MariaDB test server's DSN %s is not root over tcp(127.0.0.1:...): cannot log in as a victim account", store.Redact(iso.DSN))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		user, pass := "faults_"+randHex(6), randHex(8)
		account := fmt.Sprintf("'%s'@'127.0.0.1'", user)
		for _, q := range []string{
			fmt.Sprintf("CREATE USER %s IDENTIFIED BY '%s'", account, pass),
			fmt.Sprintf("GRANT ALL PRIVILEGES ON `%s`.* TO %s", dbNameOf(iso.DSN), account),
		} {
			if _, err := iso.Store().ExecContext(ctx, q); err != nil {
				t.Fatalf("victim account: %v", err)
			}
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = iso.Store().ExecContext(ctx, "DROP USER "+account)
		})
		dsn := strings.Replace(iso.DSN, "mysql://root@", fmt.Sprintf("mysql://%s:%s@", user, pass), 1)
		db := openPG(t, dsn) // openPG opens any dblock DSN
		return db, &killer{kind: iso.Kind, adm: iso.DB, tag: user}
	}
	t.Fatalf("no connection killer for %s", iso.Kind)
	return nil, nil
}

// kill ends every session of the victim and returns how many it ended.
func (k *killer) kill(ctx context.Context) (int, error) {
	switch k.kind {
	case store.Postgres:
		var n int
		err := store.Of(k.adm).GetContext(ctx, &n, `SELECT count(*) FROM (
    SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()
) t`, k.tag)
		return n, err
	case store.MySQL:
		conn, err := store.Of(k.adm).Connx(ctx)
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		var ids []int64
		if err := conn.SelectContext(ctx, &ids,
			"SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ? AND ID <> CONNECTION_ID()", k.tag); err != nil {
			return 0, err
		}
		n := 0
		for _, id := range ids {
			if _, err := conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
				n++
			}
		}
		return n, nil
	}
	return 0, errors.New("unsupported")
}

// leaseHolder is what the tests over leaseModes ask of a holder.
type leaseHolder interface {
	Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error)
	Close() error
}

// leaseModes builds a holder of each lease mode on a pool. Its leases are
// asked for with leaseModeTTL (the election's candidates are configured
// with it, since a Campaign takes no options).
var leaseModes = []struct {
	name string
	new  func(db *dialect.DB) (leaseHolder, error)
}{
	{dblock.ModeOptimistic, func(db *dialect.DB) (leaseHolder, error) {
		return optimistic.New(db, &optimistic.Config{Logger: quiet})
	}},
	{dblock.ModeFair, func(db *dialect.DB) (leaseHolder, error) {
		return fairqueue.New(db, &fairqueue.Config{Logger: quiet})
	}},
	{modeElection, func(db *dialect.DB) (leaseHolder, error) {
		return newElectionHolder(db, leaseModeTTL), nil
	}},
}

// leaseModeTTL is the lease of the holders of leaseModes.
const leaseModeTTL = 1500 * time.Millisecond

// TestFaultConnectionDeathLease kills, server-side and repeatedly, every
// connection of a process holding a renewed lease (optimistic, fair, or an
// elected leader's term; pg_terminate_backend, MariaDB KILL). The watchdog
// must keep renewing on fresh connections before the deadline: the lease is
// never reported lost, nobody else can take the name meanwhile, and Release
// succeeds.
func TestFaultConnectionDeathLease(t *testing.T) {
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		for _, mode := range leaseModes {
			t.Run(string(kind)+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				connDeathLease(t, kind, mode.new)
			})
		}
	}
}

func connDeathLease(t *testing.T, kind store.Kind, newLocker func(db *dialect.DB) (leaseHolder, error)) {
	iso := dbtest.New(t, kind)
	hdb, k := holderDB(t, iso)
	holder, err := newLocker(hdb)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	rival, err := optimistic.New(iso.DB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close()

	const ttl = leaseModeTTL
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := holder.Acquire(ctx, "conn-death", dblock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	end := time.Now().Add(4 * ttl)
	for time.Now().Before(end) {
		kctx, kcancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := k.kill(kctx)
		kcancel()
		if err != nil {
			t.Fatalf("kill the holder's sessions: %v", err)
		}
		killed += n
		if err := lease.Err(); err != nil {
			t.Fatalf("after %d killed sessions the lease was reported lost: %v", killed, err)
		}
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		l2, err := rival.TryAcquire(tctx, "conn-death", dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
		tcancel()
		if err == nil {
			_ = l2.Release(ctx)
			t.Fatalf("a rival acquired the name while the holder's lease was being renewed")
		}
		if !errors.Is(err, dblock.ErrNotAcquired) {
			t.Fatalf("rival TryAcquire: %v", err)
		}
		// About one kill per renewal interval (TTL/3): every renewal
		// may find its pooled connection dead.
		time.Sleep(ttl / 3)
	}
	if killed == 0 {
		t.Fatal("no session of the holder was found to kill")
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release after %d killed sessions: %v", killed, err)
	}
	t.Logf("%d holder sessions killed over %v; the lease stayed held and released cleanly", killed, 4*ttl)
}

// TestFaultConnectionDeathPessimistic kills the session holding a pessimistic
// lock server-side. The holder must see Done() close with a loss wrapping
// dblock.ErrConnLost (within 10 s: the watch interval is 500 ms), and a
// rival must then get the name.
func TestFaultConnectionDeathPessimistic(t *testing.T) {
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			hdb, k := holderDB(t, iso)
			holder, err := pessimistic.New(hdb, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			rival, err := optimistic.New(iso.DB, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rival.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			lease, err := holder.Acquire(ctx, "conn-death-tx", dblock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rival.TryAcquire(ctx, "conn-death-tx", dblock.WithTTL(time.Minute)); !errors.Is(err, dblock.ErrNotAcquired) {
				t.Fatalf("rival TryAcquire while the transaction holds the row: %v, want ErrNotAcquired", err)
			}
			n, err := k.kill(ctx)
			if err != nil || n == 0 {
				t.Fatalf("kill the holder's session: killed %d, %v", n, err)
			}
			killedAt := time.Now()
			select {
			case <-lease.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("Done() still open 10 s after the holding session was killed")
			}
			noticed := time.Since(killedAt)
			if err := lease.Err(); !errors.Is(err, dblock.ErrLost) || !errors.Is(err, dblock.ErrConnLost) {
				t.Fatalf("Err() = %v, want a loss wrapping ErrConnLost", err)
			}
			l2, err := rival.TryAcquire(ctx, "conn-death-tx", dblock.WithTTL(time.Minute))
			if err != nil {
				t.Fatalf("rival after the holder's session died: %v", err)
			}
			if err := l2.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := lease.Release(ctx); !errors.Is(err, dblock.ErrLost) {
				t.Fatalf("Release after the loss = %v, want an error wrapping ErrLost", err)
			}
			t.Logf("%d session(s) killed; the holder noticed after %v", n, noticed.Round(time.Millisecond))
		})
	}
}

// TestFaultRenewalImpossible gives a holder of a renewed 1.5 s lease
// (optimistic or fair) renewals that can never succeed: the migration role
// locks the lease row (SELECT ... FOR UPDATE in an open transaction), so
// every renewal waits, and every session of the holder is killed every
// 200 ms, so waiting renewals die too. The holder must stop trusting its
// lease before the database ends it: its local deadline is before the row's
// expiry (read under the row lock, so no renewal can move it), and Done
// closes with ErrLost no later than that expiry (plus 250 ms for the
// scheduler of a loaded machine; the figure is logged). Once the blocker
// lets go, a rival gets the name within 3 s of the expiry: no blocked
// renewal extended the lease behind the holder's back.
func TestFaultRenewalImpossible(t *testing.T) {
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		for _, mode := range leaseModes {
			t.Run(string(kind)+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				iso := dbtest.New(t, kind)
				hdb, k := holderDB(t, iso)
				holder, err := mode.new(hdb)
				if err != nil {
					t.Fatal(err)
				}
				defer holder.Close()
				const ttl = leaseModeTTL
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				lease, err := holder.Acquire(ctx, "no-renewal", dblock.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				lostAt := make(chan time.Time, 1)
				go func() {
					<-lease.Done()
					lostAt <- time.Now()
				}()
				// Let one renewal succeed first (at TTL/3).
				time.Sleep(ttl/3 + 100*time.Millisecond)
				tx, err := iso.Store().BeginTxx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback() }()
				var one int
				if err := tx.GetContext(ctx, &one, iso.Store().Rebind("SELECT 1 FROM dblock_locks WHERE name = ? FOR UPDATE"), "no-renewal"); err != nil {
					t.Fatalf("lock the lease row: %v", err)
				}
				h, err := iso.Store().LeaseHolder(ctx, tx, "no-renewal")
				if err != nil || h.Owner != lease.Owner() {
					t.Fatalf("lease row under the blocker's lock: owner %q (%v), want %q", h.Owner, err, lease.Owner())
				}
				expiry := h.ExpiresAt
				stopKill := make(chan struct{})
				killDone := make(chan int)
				go func() {
					n := 0
					defer func() { killDone <- n }()
					for {
						kctx, kcancel := context.WithTimeout(ctx, 5*time.Second)
						m, _ := k.kill(kctx)
						kcancel()
						n += m
						select {
						case <-stopKill:
							return
						case <-time.After(200 * time.Millisecond):
						}
					}
				}()
				var lost time.Time
				select {
				case lost = <-lostAt:
				case <-time.After(ttl + 5*time.Second):
					close(stopKill)
					<-killDone
					t.Fatalf("Done() still open %v after renewals were blocked (TTL %v)", ttl+5*time.Second, ttl)
				}
				close(stopKill)
				killed := <-killDone
				deadline, _ := lease.Deadline()
				if !deadline.Before(expiry) {
					t.Errorf("the holder's local deadline %v is not before the database's expiry %v", deadline, expiry)
				}
				if err := lease.Err(); !errors.Is(err, dblock.ErrLost) {
					t.Errorf("Err() = %v, want ErrLost", err)
				}
				if lost.After(expiry.Add(250 * time.Millisecond)) {
					t.Errorf("Done() closed %v after the database's expiry", lost.Sub(expiry))
				}
				// End the blocked renewals, then let the row go.
				kctx, kcancel := context.WithTimeout(ctx, 5*time.Second)
				_, _ = k.kill(kctx)
				kcancel()
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				rival, err := optimistic.New(iso.DB, &optimistic.Config{Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				defer rival.Close()
				got, at := pollAcquire(t, rival, "no-renewal", time.Until(expiry.Add(3*time.Second)))
				if got == nil {
					h, _ := iso.Store().LeaseHolder(ctx, nil, "no-renewal")
					t.Fatalf("a rival did not get the name within 3 s of its expiry: owner %q until %v", h.Owner, h.ExpiresAt)
				}
				_ = got.Release(ctx)
				t.Logf("%d holder sessions killed; the holder's deadline was %v before the database's expiry, Done() closed %v before it; a rival got the name %v after it",
					killed, expiry.Sub(deadline).Round(time.Microsecond), expiry.Sub(lost).Round(time.Millisecond), at.Sub(expiry).Round(time.Millisecond))
			})
		}
	}
}
