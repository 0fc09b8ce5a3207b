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
	"github.com/dblock-go/dblock/internal/dbtest"
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
	kind dialect.Kind
	adm  *dialect.DB
	// tag identifies the victim's sessions: its application_name on
	// PostgreSQL, its database on MariaDB.
	tag string
}

// holderDB opens a second pool on iso's database whose sessions a killer can
// find, and the killer.
func holderDB(t *testing.T, iso *dbtest.Isolated) (*dialect.DB, *killer) {
	t.Helper()
	switch iso.Kind {
	case dialect.Postgres:
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
	case dialect.MySQL:
		// The holder's pool is the only client of the isolated database
		// besides the killer's own connection, which the query excludes.
		db := iso.Open(t)
		rest := strings.TrimPrefix(iso.DSN, "mysql://")
		if i := strings.Index(rest, "?"); i >= 0 {
			rest = rest[:i]
		}
		dbName := rest[strings.LastIndex(rest, "/")+1:]
		return db, &killer{kind: iso.Kind, adm: iso.DB, tag: dbName}
	}
	t.Fatalf("no connection killer for %s", iso.Kind)
	return nil, nil
}

// kill ends every session of the victim and returns how many it ended.
func (k *killer) kill(ctx context.Context) (int, error) {
	switch k.kind {
	case dialect.Postgres:
		var n int
		err := k.adm.GetContext(ctx, &n, `SELECT count(*) FROM (
    SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()
) t`, k.tag)
		return n, err
	case dialect.MySQL:
		conn, err := k.adm.Connx(ctx)
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		var ids []int64
		if err := conn.SelectContext(ctx, &ids,
			"SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()", k.tag); err != nil {
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

// TestFaultConnectionDeathLease kills, server-side and repeatedly, every
// connection of a process holding a renewed lease (pg_terminate_backend,
// MariaDB KILL). The watchdog must keep renewing on fresh connections before
// the deadline: the lease is never reported lost, nobody else can take the
// name meanwhile, and Release succeeds.
func TestFaultConnectionDeathLease(t *testing.T) {
	for _, kind := range []dialect.Kind{dialect.Postgres, dialect.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			hdb, k := holderDB(t, iso)
			holder, err := optimistic.New(hdb, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			rival, err := optimistic.New(iso.DB, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rival.Close()

			const ttl = 1500 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := holder.Acquire(ctx, "conn-death", dblock.WithTTL(ttl), dblock.WithRenewal(true))
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
				l2, err := rival.TryAcquire(tctx, "conn-death", dblock.WithTTL(time.Minute))
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
		})
	}
}

// TestFaultConnectionDeathPessimistic kills the session holding a pessimistic
// lock server-side. The holder must see Done() close with a loss wrapping
// dblock.ErrConnLost (within 10 s: the watch interval is 500 ms), and a
// rival must then get the name.
func TestFaultConnectionDeathPessimistic(t *testing.T) {
	for _, kind := range []dialect.Kind{dialect.Postgres, dialect.MySQL} {
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
