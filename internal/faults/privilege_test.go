package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/history"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/reaper"
	"github.com/dblock-go/dblock/rwlock"
	"github.com/dblock-go/dblock/semaphore"
)

// PostgresGrants are the statements that let a role use every mode and the
// reaper on tables created by a more privileged migration role (the README
// repeats them). %s is the role.
var PostgresGrants = []string{
	"GRANT SELECT, INSERT, UPDATE, DELETE ON dblock_locks, dblock_waiters TO %s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON dblock_shares, dblock_semaphores, dblock_permits, dblock_slots TO %s",
	"GRANT USAGE ON SEQUENCE dblock_token_seq, dblock_waiters_id_seq, dblock_permits_id_seq TO %s",
}

// MySQLGrants are the MySQL/MariaDB equivalent; %[1]s is the database and
// %[2]s the account.
var MySQLGrants = []string{
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_locks TO %[2]s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_waiters TO %[2]s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_fence TO %[2]s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_shares TO %[2]s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_semaphores TO %[2]s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_permits TO %[2]s",
	"GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_slots TO %[2]s",
	"GRANT EXECUTE ON PROCEDURE %[1]s.dblock_acquire_share TO %[2]s",
	"GRANT EXECUTE ON PROCEDURE %[1]s.dblock_release_share TO %[2]s",
	"GRANT EXECUTE ON PROCEDURE %[1]s.dblock_acquire_permits TO %[2]s",
	mysqlCommitGrant,
	"GRANT EXECUTE ON PROCEDURE %[1]s.dblock_enqueue_check TO %[2]s",
	"GRANT EXECUTE ON PROCEDURE %[1]s.dblock_take_head TO %[2]s",
	mysqlJoinedReleaseGrant,
	mysqlAcquireReadGrant,
	mysqlLockBeginGrant,
	mysqlDirectGrant,
	mysqlHandOverGrant,
	mysqlGrantPermitsGrant,
}

// mysqlGrantPermitsGrant lets MariaDB's semaphore grants, recording their
// request, be one call, the procedure of MySQL migration 00029; without it
// they are a transaction of plain statements.
const mysqlGrantPermitsGrant = "GRANT EXECUTE ON PROCEDURE %[1]s.dblock_grant_permits TO %[2]s"

// mysqlHandOverGrant lets MariaDB's fair releases hand the name to the
// releasing Locker's next waiter in one call, the procedure of MySQL
// migration 00028; without it they release, and the waiter takes.
const mysqlHandOverGrant = "GRANT EXECUTE ON PROCEDURE %[1]s.dblock_hand_over TO %[2]s"

// mysqlDirectGrant lets MariaDB's fair acquisitions of a name nobody
// queues for take it in one call, the procedure of MySQL migration 00027;
// without it they send three statements.
const mysqlDirectGrant = "GRANT EXECUTE ON PROCEDURE %[1]s.dblock_acquire_direct TO %[2]s"

// mysqlLockBeginGrant lets MariaDB's pessimistic holds begin with their
// lock, the procedure of MySQL migration 00026; without it they send START
// TRANSACTION first.
const mysqlLockBeginGrant = "GRANT EXECUTE ON PROCEDURE %[1]s.dblock_lock_begin TO %[2]s"

// mysqlAcquireReadGrant lets MariaDB's readers begin a period recorded in
// the name's row with the procedure of MySQL migration 00025; without it
// they acquire with dblock_acquire_share, which gives every reader a share.
const mysqlAcquireReadGrant = "GRANT EXECUTE ON PROCEDURE %[1]s.dblock_acquire_read TO %[2]s"

// mysqlJoinedReleaseGrant lets MariaDB's readers that joined a period
// release with the procedure of MySQL migration 00023; without it they
// release with dblock_release_share.
const mysqlJoinedReleaseGrant = "GRANT EXECUTE ON PROCEDURE %[1]s.dblock_release_joined_share TO %[2]s"

// mysqlCommitGrant lets MariaDB's pessimistic holds commit with the
// procedure of MySQL migration 00018; without it they send its block.
const mysqlCommitGrant = "GRANT EXECUTE ON PROCEDURE %[1]s.dblock_commit_checked TO %[2]s"

// The README's last grant: read access to the migrations' version table,
// so the schema check (migrations.Check, the CLI's status) sees which
// migrations are applied. Without it the check probes the dblock tables.
const (
	PostgresVersionGrant = "GRANT SELECT ON dblock_db_version TO %s"
	MySQLVersionGrant    = "GRANT SELECT ON %[1]s.dblock_db_version TO %[2]s"
)

// The README's grant for the acquisition history: the trigger writes
// entries with the application's rights on PostgreSQL, pessimistic Lockers
// write theirs, the CLI lists them and the reaper prunes them.
const (
	PostgresHistoryGrant = "GRANT SELECT, INSERT, UPDATE, DELETE ON dblock_history TO %s"
	MySQLHistoryGrant    = "GRANT SELECT, INSERT, UPDATE, DELETE ON %[1]s.dblock_history TO %[2]s"
)

// TestFaultLeastPrivilege runs every mode, a reaper pass with work of every
// kind, and the schema check as a role that has only
// SELECT/INSERT/UPDATE/DELETE on the dblock tables (and USAGE on the
// PostgreSQL sequences): no DDL, no ownership, no superuser.
func TestFaultLeastPrivilege(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		pg := newPrimary(t)
		adm := openPG(t, pg.DSN())
		migrate(t, adm)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		role := "dblock_app_" + randHex(4)
		// PostgreSQL 14 and older let every role create tables in public:
		// take that away, so "no DDL" holds on every version.
		stmts := append([]string{"REVOKE CREATE ON SCHEMA public FROM PUBLIC", "CREATE ROLE " + role + " LOGIN"}, PostgresGrants...)
		for _, s := range stmts {
			if _, err := adm.SQL().ExecContext(ctx, strings.ReplaceAll(s, "%s", role)); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		dsn := strings.Replace(pg.DSN(), "postgres://postgres@", "postgres://"+role+"@", 1)
		leastPrivilege(t, adm, openPG(t, dsn), strings.ReplaceAll(PostgresVersionGrant, "%s", role),
			strings.ReplaceAll(PostgresHistoryGrant, "%s", role))
	})
	t.Run("mysql", func(t *testing.T) { mysqlLeastPrivilege(t, MySQLGrants) })
	// Grants written before MySQL migration 00018: the commit's procedure
	// may not be executed, and pessimistic holds still commit.
	t.Run("mysql-grants-before-00018", func(t *testing.T) {
		mysqlLeastPrivilege(t, slices.DeleteFunc(slices.Clone(MySQLGrants), func(g string) bool { return g == mysqlCommitGrant }))
	})
	// Grants written before MySQL migration 00023: a joined reader's
	// release may not call its procedure, and releases as before.
	t.Run("mysql-grants-before-00023", func(t *testing.T) {
		mysqlLeastPrivilege(t, slices.DeleteFunc(slices.Clone(MySQLGrants), func(g string) bool { return g == mysqlJoinedReleaseGrant }))
	})
	// Grants written before MySQL migration 00025: a reader's acquisition
	// may not call dblock_acquire_read, and acquires as before.
	t.Run("mysql-grants-before-00025", func(t *testing.T) {
		mysqlLeastPrivilege(t, slices.DeleteFunc(slices.Clone(MySQLGrants), func(g string) bool { return g == mysqlAcquireReadGrant }))
	})
	// Grants written before MySQL migration 00026: a pessimistic hold may
	// not begin with its lock's call, and begins as before.
	t.Run("mysql-grants-before-00026", func(t *testing.T) {
		mysqlLeastPrivilege(t, slices.DeleteFunc(slices.Clone(MySQLGrants), func(g string) bool { return g == mysqlLockBeginGrant }))
	})
	// Grants written before MySQL migration 00027: a fair acquisition of
	// a name nobody queues for may not call dblock_acquire_direct, and
	// acquires as before.
	t.Run("mysql-grants-before-00027", func(t *testing.T) {
		mysqlLeastPrivilege(t, slices.DeleteFunc(slices.Clone(MySQLGrants), func(g string) bool { return g == mysqlDirectGrant }))
	})
	// Grants written before MySQL migration 00028: a fair release may not
	// hand the name over in one call, and releases as before.
	t.Run("mysql-grants-before-00028", func(t *testing.T) {
		mysqlLeastPrivilege(t, slices.DeleteFunc(slices.Clone(MySQLGrants), func(g string) bool { return g == mysqlHandOverGrant }))
	})
	// Grants written before MySQL migration 00029: a semaphore's grant may
	// not call dblock_grant_permits, and is a transaction of plain
	// statements.
	t.Run("mysql-grants-before-00029", func(t *testing.T) {
		mysqlLeastPrivilege(t, slices.DeleteFunc(slices.Clone(MySQLGrants), func(g string) bool { return g == mysqlGrantPermitsGrant }))
	})
	// The README's alternative to the procedure grants: EXECUTE on the
	// database outlives a migration that replaces a procedure (dropped and
	// created again, which drops a grant on the procedure itself).
	t.Run("mysql-database-execute", func(t *testing.T) {
		grants := slices.DeleteFunc(slices.Clone(MySQLGrants), func(g string) bool { return strings.Contains(g, "ON PROCEDURE") })
		grants = append(grants, "GRANT EXECUTE ON %[1]s.* TO %[2]s")
		iso := dbtest.New(t, store.MySQL)
		dbName := dbNameOf(iso.DSN)
		account, dsn := mysqlAccount(t, iso, dbName, grants)
		replaceProcedures(t, iso.DB)
		leastPrivilege(t, iso.DB, openPG(t, dsn), fmt.Sprintf(MySQLVersionGrant, dbName, account), fmt.Sprintf(MySQLHistoryGrant, dbName, account))
	})
}

// replaceProcedures runs the migrations that replace the read lock's
// procedures (MySQL 00015 onwards) down and up again.
func replaceProcedures(t *testing.T, db *dialect.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := migrations.DownTo(ctx, db, 14); err != nil {
		t.Fatalf("migrate down to 14: %v", err)
	}
	migrate(t, db)
}

// mysqlLeastPrivilege is TestFaultLeastPrivilege on MySQL/MariaDB, as an
// account that has only grants.
func mysqlLeastPrivilege(t *testing.T, grants []string) {
	iso := dbtest.New(t, store.MySQL)
	dbName := dbNameOf(iso.DSN)
	account, dsn := mysqlAccount(t, iso, dbName, grants)
	db := openPG(t, dsn) // openPG opens any dblock DSN
	leastPrivilege(t, iso.DB, db, fmt.Sprintf(MySQLVersionGrant, dbName, account), fmt.Sprintf(MySQLHistoryGrant, dbName, account))
}

// mysqlAccount creates an account on iso's server with grants on database
// dbName (dropped at cleanup), and returns it and a DSN that logs in as it.
func mysqlAccount(t *testing.T, iso *dbtest.Isolated, dbName string, grants []string) (account, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	user := "dblock_app_" + randHex(4)
	account = fmt.Sprintf("'%s'@'127.0.0.1'", user)
	pass := randHex(8)
	if _, err := iso.Store().ExecContext(ctx, fmt.Sprintf("CREATE USER %s IDENTIFIED BY '%s'", account, pass)); err != nil {
		t.Fatalf("create user: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = iso.Store().ExecContext(ctx, "DROP USER "+account)
	})
	for _, g := range grants {
		s := fmt.Sprintf(g, dbName, account)
		if _, err := iso.Store().ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	dsn = strings.Replace(iso.DSN, "mysql://root@", fmt.Sprintf("mysql://%s:%s@", user, pass), 1)
	if dsn == iso.DSN || !strings.Contains(iso.DSN, "@tcp(127.0.0.1:") {
		ciRequired(t, "the MariaDB test server's DSN %s is not root over tcp(127.0.0.1:...): cannot log in as a restricted account", store.Redact(iso.DSN))
	}
	return account, dsn
}

// dbNameOf returns the database of a mysql:// DSN.
func dbNameOf(dsn string) string {
	rest := strings.TrimPrefix(dsn, "mysql://")
	if i := strings.Index(rest, "?"); i >= 0 {
		rest = rest[:i]
	}
	return rest[strings.LastIndex(rest, "/")+1:]
}

// leastPrivilege runs everything as the restricted db; adm (the migration
// role) only prepares work for the reaper and grants versionGrant.
func leastPrivilege(t *testing.T, adm, db *dialect.DB, versionGrant, historyGrant string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// DDL is refused: the role really is restricted.
	if _, err := db.SQL().ExecContext(ctx, "CREATE TABLE dblock_priv_probe (id int)"); err == nil {
		t.Fatal("the restricted role could create a table: the test is not testing least privilege")
	}

	opt, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Close()
	// Acquire, renew (a 1.5 s lease, renewed every 0.5 s, held for 2.5 s)
	// and release.
	lease, err := opt.Acquire(ctx, "priv-opt", dblock.WithTTL(1500*time.Millisecond))
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
	fl, err := fair.Acquire(ctx, "priv-fair", dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
	if err != nil {
		t.Fatalf("fair acquire: %v", err)
	}
	// A second fair waiter queues (a waiter row) and gives up.
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, werr := fair.Acquire(wctx, "priv-fair", dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
	wcancel()
	if !errors.Is(werr, dblock.ErrNotAcquired) {
		t.Fatalf("fair waiter = %v, want ErrNotAcquired", werr)
	}
	fairHandOff(ctx, t, fair, fl)

	sharedPrivileges(ctx, t, db)

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

	// Work of every kind for the reaper: a lease left to expire; a fair
	// waiter (inserted by the role) whose heartbeat the migration role
	// backdates; a free row (acquired and released by the role) made idle
	// for two days. On MySQL/MariaDB deleting the idle row raises the
	// dblock_fence floor, which the role must be allowed to do.
	if _, err := opt.Acquire(ctx, "priv-expired", dblock.WithTTL(50*time.Millisecond), dblock.WithMaxHold(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	dbtest.AddWaiter(t, db, "priv-deadwaiter", dblock.NewOwner(), time.Minute)
	idle, err := opt.Acquire(ctx, "priv-idle", dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	idleToken := idle.Token()
	if err := idle.Release(ctx); err != nil {
		t.Fatal(err)
	}
	backdate := []string{
		`UPDATE dblock_waiters SET heartbeat_at = now() - interval '1 hour', expires_at = now() - interval '1 hour' WHERE name = 'priv-deadwaiter'`,
		`UPDATE dblock_locks SET updated_at = now() - interval '48 hours' WHERE name = 'priv-idle' AND owner IS NULL`,
	}
	if store.Of(adm).Dialect.Kind() == store.MySQL {
		backdate = []string{
			`UPDATE dblock_waiters SET heartbeat_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR WHERE name = 'priv-deadwaiter'`,
			`UPDATE dblock_locks SET updated_at = UTC_TIMESTAMP(6) - INTERVAL 48 HOUR WHERE name = 'priv-idle' AND owner IS NULL`,
		}
	}
	for _, q := range backdate {
		res, err := adm.SQL().ExecContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("%s: %d rows, want 1", q, n)
		}
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
	if !st.Worked || st.ExpiredFreed < 1 || st.WaitersDeleted < 1 || st.IdleDeleted < 1 {
		t.Fatalf("reaper pass: %+v, want it to work, free the expired lease, delete the dead waiter and the idle row", st)
	}
	var left int
	if err := store.Of(adm).GetContext(ctx, &left, "SELECT count(*) FROM dblock_locks WHERE name = 'priv-idle'"); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("the idle row is still there after a pass that deleted %d idle rows", st.IdleDeleted)
	}
	again, err := opt.Acquire(ctx, "priv-idle", dblock.WithTTL(time.Minute), dblock.WithMaxHold(time.Minute))
	if err != nil {
		t.Fatalf("acquire the deleted name: %v", err)
	}
	if again.Token() <= idleToken {
		t.Fatalf("token %d after the idle row was deleted is not above the deleted row's %d", again.Token(), idleToken)
	}
	_ = again.Release(ctx)
	t.Logf("reaper pass as the restricted role: %+v; token of the deleted name %d, then %d", st, idleToken, again.Token())

	// The schema check, as the CLI's status runs it: without read access
	// to the version table it probes the dblock tables; with the README's
	// grant it reads the applied versions.
	if err := migrations.Check(ctx, db); err != nil {
		t.Errorf("migrations.Check as the restricted role, without access to the version table: %v", err)
	}
	if _, err := adm.SQL().ExecContext(ctx, versionGrant); err != nil {
		t.Fatalf("%s: %v", versionGrant, err)
	}
	if err := migrations.Check(ctx, db); err != nil {
		t.Errorf("migrations.Check as the restricted role, after %s: %v", versionGrant, err)
	}
	historyPrivileges(ctx, t, adm, db, historyGrant)
}

// historyPrivileges: with the history enabled (by the migration role) and
// the README's grant, the restricted role's lease and pessimistic hold each
// leave an entry, and the role lists and prunes them.
func historyPrivileges(ctx context.Context, t *testing.T, adm, db *dialect.DB, grant string) {
	t.Helper()
	if err := history.Enable(ctx, adm); err != nil {
		t.Fatalf("enable history: %v", err)
	}
	if _, err := adm.SQL().ExecContext(ctx, grant); err != nil {
		t.Fatalf("%s: %v", grant, err)
	}
	if on, err := history.Enabled(ctx, db); err != nil || !on {
		t.Fatalf("history enabled, as the restricted role: %v %v", on, err)
	}
	opt, err := optimistic.New(db, &optimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Close()
	pl, err := pessimistic.New(db, &pessimistic.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	for _, l := range []dblock.Locker{opt, pl.AsLocker()} {
		lease, err := l.Acquire(ctx, "priv-history")
		if err != nil {
			t.Fatalf("acquire with the history enabled: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release with the history enabled: %v", err)
		}
	}
	es, err := history.List(ctx, db, history.Query{Name: "priv-history"})
	if err != nil || len(es) != 2 || es[0].Mode != dblock.ModePessimistic || es[1].Mode != dblock.ModeOptimistic {
		t.Fatalf("history as the restricted role: %+v %v, want a pessimistic entry, then an optimistic one", es, err)
	}
	time.Sleep(10 * time.Millisecond)
	if n, err := history.Prune(ctx, db, time.Millisecond); err != nil || n < 2 {
		t.Fatalf("prune as the restricted role: %d %v, want at least 2", n, err)
	}
}

// sharedPrivileges takes and releases two read locks (the second joins the
// first's period) and a write lock (rwlock), a semaphore's permit and a
// scheduled job's slot as the restricted role.
func sharedPrivileges(ctx context.Context, t *testing.T, db *dialect.DB) {
	t.Helper()
	rw, err := rwlock.New(db, &rwlock.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	r, err := rw.AcquireRead(ctx, "priv-rw")
	if err != nil {
		t.Fatalf("read acquire: %v", err)
	}
	// A second owner joins the period: its release is a joined share's
	// (MariaDB: the procedure of MySQL migration 00023).
	joined, err := rw.AcquireRead(ctx, "priv-rw", dblock.WithOwner("priv-joiner"))
	if err != nil {
		t.Fatalf("read acquire (joining): %v", err)
	}
	if err := joined.Release(ctx); err != nil {
		t.Fatalf("read release (joined): %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatalf("read release: %v", err)
	}
	w, err := rw.Acquire(ctx, "priv-rw")
	if err != nil {
		t.Fatalf("write acquire: %v", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("write release: %v", err)
	}
	sem, err := semaphore.New(db, &semaphore.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	g, err := sem.Acquire(ctx, "priv-sem", 2, 1)
	if err != nil {
		t.Fatalf("semaphore acquire: %v", err)
	}
	if err := g.Release(ctx); err != nil {
		t.Fatalf("semaphore release: %v", err)
	}
	if _, err := store.Of(db).ClaimSlot(ctx, "priv-job", time.Now()); err != nil {
		t.Fatalf("claim a slot: %v", err)
	}
}

// fairHandOff releases fl while a waiter of the same Locker waits for its
// name: the release hands the name over in its own statement where the
// database and the grants allow it, and releases otherwise; either way
// the waiter gets the name.
func fairHandOff(ctx context.Context, t *testing.T, fair *fairqueue.Locker, fl *dblock.Lease) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		lease, err := fair.Acquire(ctx, fl.Name(), dblock.WithTTL(time.Minute))
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, err := fair.Queue(ctx, fl.Name())
		if err != nil {
			t.Fatalf("fair queue: %v", err)
		}
		if len(q) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fair waiter not queued after 10s: %v", q)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := fl.Release(ctx); err != nil {
		t.Fatalf("fair release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("fair waiter after the release: %v", err)
	}
}
