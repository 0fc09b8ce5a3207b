package store_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// holdTx holds name the way a pessimistic lock does: a transaction on a
// second pool that locks its row and bumps its token (SQLite: that holds the
// write lock). It returns the end of the hold.
func holdTx(t *testing.T, iso *dbtest.Isolated, name string) (end func()) {
	t.Helper()
	ctx := context.Background()
	db := iso.Open(t)
	if iso.Kind != store.SQLite {
		if err := store.Of(db).EnsureRow(ctx, nil, name); err != nil {
			t.Fatalf("ensure %s: %v", name, err)
		}
	}
	tx, err := store.Of(db).BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if iso.Kind == store.SQLite {
		if err := store.Of(db).EnsureRow(ctx, tx, name); err != nil {
			t.Fatalf("ensure %s: %v", name, err)
		}
	}
	if _, err := store.Of(db).LockRow(ctx, tx, name, store.RowLockParams{NoWait: true}); err != nil {
		t.Fatalf("lock %s: %v", name, err)
	}
	// A fencing token, as dblock exec asks for: the row is updated too.
	if _, err := store.Of(db).BumpToken(ctx, tx, name); err != nil {
		t.Fatalf("token %s: %v", name, err)
	}
	var once sync.Once
	end = func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(end)
	return end
}

func TestProbeTxHolds(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		db := iso.DB
		acquire := func(name string, ttl time.Duration) {
			t.Helper()
			r, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "o-" + name, Mode: dblock.ModeOptimistic, TTL: ttl})
			if err != nil || !r.Acquired {
				t.Fatalf("acquire %s: %+v %v", name, r, err)
			}
		}
		acquire("lease", time.Minute)
		acquire("expired", time.Millisecond)
		if err := store.Of(db).EnsureRow(ctx, nil, "free"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the lease of \"expired\" to run out", func() bool {
			h, err := store.Of(db).LeaseHolder(ctx, nil, "expired")
			return err == nil && h.Exists && !h.Held()
		})
		all := []string{"lease", "expired", "free", "missing", "tx", "tx2"}

		got, err := store.Of(db).ProbeTxHolds(ctx, all, 0)
		if err != nil || got.WriteLocked || len(got.Names) != 0 || got.Limited {
			t.Fatalf("nothing held by a transaction: %+v %v", got, err)
		}

		end := holdTx(t, iso, "tx")
		got, err = store.Of(db).ProbeTxHolds(ctx, all, 0)
		if err != nil {
			t.Fatal(err)
		}
		if iso.Kind == store.SQLite {
			if !got.WriteLocked || !got.Held("free") || len(got.Names) != 0 {
				t.Fatalf("SQLite with a write transaction: %+v, want WriteLocked", got)
			}
		} else {
			if got.WriteLocked || strings.Join(got.Names, ",") != "tx" || !got.Held("tx") || got.Held("free") || got.Held("lease") {
				t.Fatalf("probe with \"tx\" held: %+v, want [tx]", got)
			}
			got, err = store.Of(db).ProbeTxHolds(ctx, nil, 0)
			if err != nil || strings.Join(got.Names, ",") != "tx" || got.Limited {
				t.Fatalf("probe of every row with \"tx\" held: %+v %v", got, err)
			}
			end2 := holdTx(t, iso, "tx2")
			// Rows are probed in name order, "tx2" last; PostgreSQL
			// considers only rows a lock has marked (tx, tx2), MySQL every
			// row naming no live lease (expired, free, tx, tx2).
			limit := 1
			if iso.Kind == store.MySQL {
				limit = 3
			}
			got, err = store.Of(db).ProbeTxHolds(ctx, nil, limit)
			if err != nil || len(got.Names) != 1 || got.Names[0] != "tx" || !got.Limited {
				t.Fatalf("probe limited to exclude \"tx2\": %+v %v", got, err)
			}
			end2()
			// The probe waited for nothing and disturbed no holder: a lease
			// acquire of the free name still goes through.
			acquire("free", time.Minute)
		}
		end()
		got, err = store.Of(db).ProbeTxHolds(ctx, all, 0)
		if err != nil || got.WriteLocked || len(got.Names) != 0 {
			t.Fatalf("after the transaction ended: %+v %v", got, err)
		}
		// The SQLite probe gave its connection back with the pool's own
		// busy timeout, outside any transaction.
		if iso.Kind == store.SQLite {
			var ms int64
			if err := store.Of(db).QueryRowxContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil || ms != 5000 {
				t.Errorf("busy timeout after the probe: %d %v", ms, err)
			}
		}
	})
}

// TestProbeTxHoldsReadOnly probes from a session whose transactions are
// read-only (as on a standby): PostgreSQL refuses the locking read, and
// ReadOnlyRefused says so; MariaDB takes the probe's shared locks in a
// read-only transaction and finds the hold.
func TestProbeTxHoldsReadOnly(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			ctx := context.Background()
			holdTx(t, iso, "tx")
			sep := "?"
			if strings.Contains(iso.DSN, "?") {
				sep = "&"
			}
			param := "default_transaction_read_only=on"
			if kind == store.MySQL {
				param = "tx_read_only=1"
			}
			ro, err := store.Open(ctx, iso.DSN+sep+param)
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			got, err := ro.ProbeTxHolds(ctx, []string{"tx"}, 0)
			if kind == store.Postgres {
				if !store.ReadOnlyRefused(err) || store.PermissionDenied(err) {
					t.Errorf("probe on a read-only PostgreSQL session: %+v %v, want the read-only refusal", got, err)
				}
				return
			}
			var readOnly int
			if err := ro.QueryRowxContext(ctx, "SELECT @@tx_read_only").Scan(&readOnly); err != nil || readOnly != 1 {
				t.Fatalf("tx_read_only on the MariaDB session: %d %v, want 1", readOnly, err)
			}
			if err != nil || !got.Held("tx") {
				t.Errorf("probe on a read-only MariaDB session: %+v %v, want \"tx\" held", got, err)
			}
		})
	}
}

func TestClockNow(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		before, err := iso.Store().ClockNow(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := iso.Store().AcquireLease(ctx, nil, store.AcquireParams{Name: "n", Owner: "o", Mode: dblock.ModeOptimistic, TTL: time.Hour})
		if err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		h, err := iso.Store().LeaseHolder(ctx, nil, "n")
		if err != nil {
			t.Fatal(err)
		}
		if before.Location() != time.UTC || before.After(h.Now) || !h.ExpiresAt.After(before) {
			t.Errorf("ClockNow %v, then the row's clock %v and expiry %v", before, h.Now, h.ExpiresAt)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the driver's logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSetDriverLog provokes the MySQL driver's "closing bad idle connection"
// (an idle pooled connection killed by the server) and finds it where
// SetDriverLog sent it.
func TestSetDriverLog(t *testing.T) {
	iso := dbtest.New(t, store.MySQL)
	var buf syncBuffer
	store.SetDriverLog(&buf)
	t.Cleanup(func() { store.SetDriverLog(os.Stderr) })
	ctx := context.Background()
	db := iso.Open(t)
	db.SQL().SetMaxOpenConns(1)
	var id int64
	if err := store.Of(db).QueryRowxContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := iso.Store().ExecContext(ctx, "KILL ?", id); err != nil {
		t.Fatal(err)
	}
	// The server closes the connection shortly after KILL; the driver
	// notices when it next takes the idle connection from the pool.
	eventually(t, "the killed connection to be gone", func() bool {
		var n int
		err := iso.Store().QueryRowxContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n)
		return err == nil && n == 0
	})
	var other int64
	if err := store.Of(db).QueryRowxContext(ctx, "SELECT CONNECTION_ID()").Scan(&other); err != nil || other == id {
		t.Fatalf("query after the kill: %d %v", other, err)
	}
	if s := buf.String(); !strings.Contains(s, "[mysql] ") || !strings.Contains(s, "closing bad idle connection") {
		t.Errorf("driver log %q, want its closing-bad-idle-connection line", s)
	}
}

// eventually polls cond every 20ms until it holds, failing t after a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
