package faults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/reaper"
)

// PostgresGrants are the statements that let a role use every mode and the
// reaper on tables created by a more privileged migration role (the README
// repeats them). %s is the role.
var PostgresGrants = []string{
	"GRANT SELECT, INSERT, UPDATE, DELETE ON dblock_locks, dblock_waiters TO %s",
	"GRANT USAGE ON SEQUENCE dblock_token_seq, dblock_waiters_id_seq TO %s",
}

// MySQLGrants are the MySQL/MariaDB equivalent; %[1]s is the database and
// %[2]s the account.
var MySQLGrants = []string{
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_locks TO %[2]s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_waiters TO %[2]s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_fence TO %[2]s",
}

// TestFaultLeastPrivilege runs every mode and a reaper pass as a role that
// has only SELECT/INSERT/UPDATE/DELETE on the dblock tables (and USAGE on the
// PostgreSQL sequences): no DDL, no ownership, no superuser.
func TestFaultLeastPrivilege(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		pg := newPrimary(t)
		adm := openPG(t, pg.DSN())
		migrate(t, adm)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		role := "dblock_app_" + randHex(4)
		stmts := append([]string{"CREATE ROLE " + role + " LOGIN"}, PostgresGrants...)
		for _, s := range stmts {
			if _, err := adm.ExecContext(ctx, strings.ReplaceAll(s, "%s", role)); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		dsn := strings.Replace(pg.DSN(), "postgres://postgres@", "postgres://"+role+"@", 1)
		leastPrivilege(t, openPG(t, dsn))
	})
	t.Run("mysql", func(t *testing.T) {
		iso := dbtest.New(t, dialect.MySQL)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dbName := dbNameOf(iso.DSN)
		user := "dblock_app_" + randHex(4)
		account := fmt.Sprintf("'%s'@'127.0.0.1'", user)
		pass := randHex(8)
		if _, err := iso.DB.ExecContext(ctx, fmt.Sprintf("CREATE USER %s IDENTIFIED BY '%s'", account, pass)); err != nil {
			t.Fatalf("create user: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = iso.DB.ExecContext(ctx, "DROP USER "+account)
		})
		for _, g := range MySQLGrants {
			s := fmt.Sprintf(g, dbName, account)
			if _, err := iso.DB.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		dsn := strings.Replace(iso.DSN, "mysql://root@", fmt.Sprintf("mysql://%s:%s@", user, pass), 1)
		if dsn == iso.DSN {
			t.Skipf("cannot put a user into %s", dialect.Redact(iso.DSN))
		}
		db := openPG(t, dsn) // openPG opens any dblock DSN
		leastPrivilege(t, db)
	})
}

// dbNameOf returns the database of a mysql:// DSN.
func dbNameOf(dsn string) string {
	rest := strings.TrimPrefix(dsn, "mysql://")
	if i := strings.Index(rest, "?"); i >= 0 {
		rest = rest[:i]
	}
	return rest[strings.LastIndex(rest, "/")+1:]
}

func leastPrivilege(t *testing.T, db *dialect.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// DDL is refused: the role really is restricted.
	if _, err := db.ExecContext(ctx, "CREATE TABLE dblock_priv_probe (id int)"); err == nil {
		t.Fatal("the restricted role could create a table: the test is not testing least privilege")
	}

	opt, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Close()
	// Acquire, renew (a 1.5 s lease, renewed every 0.5 s, held for 2.5 s)
	// and release.
	lease, err := opt.Acquire(ctx, "priv-opt", dblock.WithTTL(1500*time.Millisecond), dblock.WithRenewal(true))
	if err != nil {
		t.Fatalf("optimistic acquire: %v", err)
	}
	time.Sleep(2500 * time.Millisecond)
	if err := lease.Err(); err != nil {
		t.Fatalf("optimistic renewal: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("optimistic release: %v", err)
	}

	fair, err := fairqueue.New(db, &fairqueue.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer fair.Close()
	fl, err := fair.Acquire(ctx, "priv-fair", dblock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("fair acquire: %v", err)
	}
	// A second fair waiter queues (a waiter row) and gives up.
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, werr := fair.Acquire(wctx, "priv-fair", dblock.WithTTL(time.Minute))
	wcancel()
	if !errors.Is(werr, dblock.ErrNotAcquired) {
		t.Fatalf("fair waiter = %v, want ErrNotAcquired", werr)
	}
	if err := fl.Release(ctx); err != nil {
		t.Fatalf("fair release: %v", err)
	}

	pl, err := pessimistic.New(db, &pessimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	pLease, err := pl.Acquire(ctx, "priv-tx", dblock.WithToken())
	if err != nil {
		t.Fatalf("pessimistic acquire: %v", err)
	}
	if pLease.Token() == 0 {
		t.Fatal("pessimistic acquire with WithToken returned no token")
	}
	if err := pLease.Release(ctx); err != nil {
		t.Fatalf("pessimistic release: %v", err)
	}

	// Something for the reaper: a lease left to expire.
	if _, err := opt.Acquire(ctx, "priv-expired", dblock.WithTTL(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	r, err := reaper.New(db, &reaper.Config{Logger: quiet, WaiterGrace: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatalf("reaper pass: %v", err)
	}
	if !st.Worked || st.ExpiredFreed < 1 {
		t.Fatalf("reaper pass: %+v, want it to work and free the expired lease", st)
	}
	t.Logf("reaper pass as the restricted role: %+v", st)
}
