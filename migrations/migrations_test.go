package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pressly/goose/v3/lock"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

// columns lists table's columns, in lower case and sorted (none when the
// table does not exist).
func columns(t *testing.T, db *dialect.DB, table string) []string {
	t.Helper()
	ctx := context.Background()
	var cols []string
	var err error
	switch store.Of(db).Dialect.Kind() {
	case store.Postgres:
		err = store.Of(db).SelectContext(ctx, &cols, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1`, table)
	case store.MySQL:
		err = store.Of(db).SelectContext(ctx, &cols, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = DATABASE() AND table_name = ?`, table)
	case store.SQLite:
		err = store.Of(db).SelectContext(ctx, &cols, `SELECT name FROM pragma_table_info(?1)`, table)
	}
	if err != nil {
		t.Fatalf("columns of %s: %v", table, err)
	}
	for i := range cols {
		cols[i] = strings.ToLower(cols[i])
	}
	slices.Sort(cols)
	return cols
}

func TestProgrammaticRoundTrip(t *testing.T) {
	t.Parallel()
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			iso := dbtest.NewEmpty(t, kind)
			if err := migrations.Check(ctx, iso.DB); !errors.Is(err, dblock.ErrSchemaMissing) {
				t.Fatalf("Check on empty database = %v, want ErrSchemaMissing", err)
			}
			if got := columns(t, iso.DB, migrations.VersionTable); len(got) != 0 {
				t.Fatalf("Check created %s: %v", migrations.VersionTable, got)
			}
			for round := 0; round < 2; round++ {
				if err := migrations.Up(ctx, iso.DB); err != nil {
					t.Fatalf("up (round %d): %v", round, err)
				}
				if got := columns(t, iso.DB, "dblock_locks"); len(got) == 0 {
					t.Fatalf("dblock_locks missing after up")
				}
				if err := migrations.DownTo(ctx, iso.DB, 0); err != nil {
					t.Fatalf("down to 0 (round %d): %v", round, err)
				}
				if got := columns(t, iso.DB, "dblock_locks"); len(got) != 0 {
					t.Fatalf("dblock_locks still there after down to 0: %v", got)
				}
			}
			st, err := migrations.Status(ctx, iso.DB)
			if err != nil || len(st) == 0 {
				t.Fatalf("status: %v %v", st, err)
			}
		})
	}
}

var (
	gooseOnce sync.Once
	goosePath string
	gooseErr  error
)

// gooseCLI builds the real goose command (pinned to the version in go.mod),
// without the drivers dblock does not use, once per test binary.
func gooseCLI(t *testing.T) string {
	t.Helper()
	gooseOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dblock-goose-")
		if err != nil {
			gooseErr = err
			return
		}
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/pressly/goose/v3").Output()
		if err != nil {
			gooseErr = err
			return
		}
		version := strings.TrimSpace(string(out))
		cmd := exec.Command("go", "install",
			"-tags=no_clickhouse no_libsql no_mssql no_vertica no_ydb no_duckdb no_starrocks no_turso",
			"github.com/pressly/goose/v3/cmd/goose@"+version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			gooseErr = errors.New("go install goose: " + err.Error() + ": " + string(out))
			return
		}
		goosePath = filepath.Join(dir, "goose")
	})
	if gooseErr != nil {
		t.Fatalf("goose CLI: %v", gooseErr)
	}
	return goosePath
}

// gooseTarget returns the goose driver name and DSN for an isolated database.
func gooseTarget(t *testing.T, iso *dbtest.Isolated) (string, string) {
	t.Helper()
	_, rest, err := store.ParseDSN(iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	switch iso.Kind {
	case store.Postgres:
		return "postgres", rest
	case store.MySQL:
		sep := "?"
		if strings.Contains(rest, "?") {
			sep = "&"
		}
		return "mysql", rest + sep + "parseTime=true"
	default:
		return "sqlite3", rest
	}
}

// TestGooseCLIRoundTrip applies the migrations with the plain goose CLI on
// their own version table — up, down-to 0, up — next to an application's own
// goose history, which must stay untouched.
func TestGooseCLIRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the goose CLI; skipped in -short mode")
	}
	t.Parallel()
	goose := gooseCLI(t)
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.NewEmpty(t, kind)
			driver, dsn := gooseTarget(t, iso)
			run := func(args ...string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				out, err := exec.CommandContext(ctx, goose, args...).CombinedOutput()
				if err != nil {
					t.Fatalf("goose %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			// The application's own migrations and history.
			appDir := t.TempDir()
			appSQL := "-- +goose Up\nCREATE TABLE app_things (id INTEGER PRIMARY KEY);\n-- +goose Down\nDROP TABLE app_things;\n"
			if err := os.WriteFile(filepath.Join(appDir, "00001_app.sql"), []byte(appSQL), 0o644); err != nil {
				t.Fatal(err)
			}
			run("-dir", appDir, driver, dsn, "up")
			appBefore := withoutLogTime(run("-dir", appDir, driver, dsn, "status"))

			dir := filepath.Join(".", migrations.Dir(dialect.Kind(kind)))
			run("-dir", dir, "-table", migrations.VersionTable, driver, dsn, "up")
			if err := migrations.Check(context.Background(), iso.DB); err != nil {
				t.Fatalf("after goose up: %v", err)
			}
			run("-dir", dir, "-table", migrations.VersionTable, driver, dsn, "down-to", "0")
			if got := columns(t, iso.DB, "dblock_locks"); len(got) != 0 {
				t.Fatalf("dblock_locks still there after down-to 0: %v", got)
			}
			run("-dir", dir, "-table", migrations.VersionTable, driver, dsn, "up")
			checkSchema(t, iso.DB)
			if err := migrations.Check(context.Background(), iso.DB); err != nil {
				t.Fatalf("after the CLI round trip: %v", err)
			}
			if appAfter := withoutLogTime(run("-dir", appDir, driver, dsn, "status")); appAfter != appBefore {
				t.Fatalf("application's goose history changed:\nbefore:\n%s\nafter:\n%s", appBefore, appAfter)
			}
			if got := columns(t, iso.DB, "app_things"); len(got) != 1 {
				t.Fatalf("application table changed: %v", got)
			}
		})
	}
}

// logTime is the date and time the goose CLI's logger puts before each line.
var logTime = regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d `)

// withoutLogTime drops the logger's time stamps, which change from one run
// to the next, from goose's output, keeping what it reports.
func withoutLogTime(s string) string { return logTime.ReplaceAllString(s, "") }

// appRole creates a role (PostgreSQL) or user (MySQL) for iso's database
// with the least-privilege grants of the README, except SELECT on the goose
// version table unless withVersion, and returns a pool connected as it and a
// function running admin SQL on iso's database. Dropped at cleanup.
func appRole(t *testing.T, iso *dbtest.Isolated, withVersion bool) (*dialect.DB, func(string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := func(q string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := iso.Store().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	role := "dblock_app_" + hex.EncodeToString(b[:])
	var dsn string
	switch iso.Kind {
	case store.Postgres:
		var schema string
		if err := iso.Store().GetContext(ctx, &schema, "SELECT current_schema()"); err != nil {
			t.Fatal(err)
		}
		admin("CREATE ROLE " + role + " NOLOGIN")
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = iso.Store().ExecContext(ctx, "DROP OWNED BY "+role)
			if _, err := iso.Store().ExecContext(ctx, "DROP ROLE "+role); err != nil {
				t.Errorf("drop role %s: %v", role, err)
			}
		})
		admin("GRANT USAGE ON SCHEMA " + schema + " TO " + role)
		admin("GRANT SELECT, INSERT, UPDATE, DELETE ON dblock_locks, dblock_waiters TO " + role)
		admin("GRANT USAGE ON SEQUENCE dblock_token_seq, dblock_waiters_id_seq TO " + role)
		if withVersion {
			admin("GRANT SELECT ON " + migrations.VersionTable + " TO " + role)
		}
		// The test server trusts only its superuser over TCP: connect as it
		// and take the role at session start (role is a settable parameter).
		dsn = iso.DSN + "&role=" + role
	case store.MySQL:
		var db string
		if err := iso.Store().GetContext(ctx, &db, "SELECT DATABASE()"); err != nil {
			t.Fatal(err)
		}
		const password = "app-pw"
		admin("CREATE USER '" + role + "'@'%' IDENTIFIED BY '" + password + "'")
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := iso.Store().ExecContext(ctx, "DROP USER '"+role+"'@'%'"); err != nil {
				t.Errorf("drop user %s: %v", role, err)
			}
		})
		for _, table := range []string{"dblock_locks", "dblock_waiters", "dblock_fence"} {
			admin("GRANT SELECT, INSERT, UPDATE, DELETE ON " + db + "." + table + " TO '" + role + "'@'%'")
		}
		if withVersion {
			admin("GRANT SELECT ON " + db + "." + migrations.VersionTable + " TO '" + role + "'@'%'")
		}
		rest := strings.TrimPrefix(iso.DSN, "mysql://")
		slash := strings.LastIndex(rest, "/")
		if at := strings.LastIndex(rest[:slash], "@"); at >= 0 {
			rest = rest[at+1:]
		}
		dsn = "mysql://" + role + ":" + password + "@" + rest
	default:
		t.Fatalf("no roles on %s", iso.Kind)
	}
	db, err := dialect.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open as %s: %v", role, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, admin
}

// TestCheckLeastPrivilege: a role with the README's grants passes Check,
// through the version table when it may read it, and by probing the dblock
// tables when it may not; it can take and release a lock. A role that may
// not read a dblock table gets the permission error, never "schema missing"
// or a silent pass; a missing table is still "schema missing".
func TestCheckLeastPrivilege(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		for _, withVersion := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/version_table_readable=%v", kind, withVersion), func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				iso := dbtest.New(t, kind)
				app, admin := appRole(t, iso, withVersion)
				if err := migrations.Check(ctx, app); err != nil {
					t.Fatalf("Check as the application role: %v", err)
				}
				r, err := store.Of(app).AcquireLease(ctx, nil, store.AcquireParams{Name: "job", Owner: "app", Mode: dblock.ModeOptimistic, TTL: time.Minute})
				if err != nil || !r.Acquired {
					t.Fatalf("acquire as the application role: %+v, %v", r, err)
				}
				if ok, err := store.Of(app).ReleaseLease(ctx, nil, "job", "app", r.Token); err != nil || !ok {
					t.Fatalf("release as the application role: %v, %v", ok, err)
				}
				if withVersion {
					return
				}
				// No SELECT on dblock_waiters: the probe must not pass.
				admin("REVOKE SELECT ON dblock_waiters FROM " + roleOf(t, app))
				err = migrations.Check(ctx, app)
				if err == nil || errors.Is(err, dblock.ErrSchemaMissing) || !store.PermissionDenied(err) {
					t.Fatalf("Check without SELECT on dblock_waiters = %v, want the permission error", err)
				}
				// A table that is gone is "schema missing". (MySQL keeps the
				// grants of a dropped table, and answers "denied" rather
				// than "no such table" to a user without them.)
				admin("GRANT SELECT ON dblock_waiters TO " + roleOf(t, app))
				admin("DROP TABLE dblock_waiters")
				if err := migrations.Check(ctx, app); !errors.Is(err, dblock.ErrSchemaMissing) {
					t.Fatalf("Check with dblock_waiters dropped = %v, want ErrSchemaMissing", err)
				}
			})
		}
	}
}

// roleOf names the connected role or user as REVOKE ... FROM takes it.
func roleOf(t *testing.T, db *dialect.DB) string {
	t.Helper()
	var who string
	q := "SELECT current_user"
	if store.Of(db).Dialect.Kind() == store.MySQL {
		q = "SELECT CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')"
	}
	if err := store.Of(db).GetContext(context.Background(), &who, q); err != nil {
		t.Fatal(err)
	}
	return who
}

// TestMigrateLock: dblock's migration runs on PostgreSQL take their own
// advisory lock (migrations.LockID), not goose's default one, so an
// application's goose run holding its lock does not hold dblock's up, and a
// dblock run holding LockID does.
func TestMigrateLock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iso := dbtest.NewEmpty(t, store.Postgres)
	holder, err := iso.Open(t).SQL().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	advisory := func(fn string, id int64) {
		t.Helper()
		if _, err := holder.ExecContext(ctx, "SELECT "+fn+"($1)", id); err != nil {
			t.Fatalf("%s(%d): %v", fn, id, err)
		}
	}

	// goose's default lock held (by an application's migration run): dblock's
	// run does not wait for it. (It would wait up to 5 minutes on the same id.)
	advisory("pg_advisory_lock", lock.DefaultLockID)
	upCtx, upCancel := context.WithTimeout(ctx, 30*time.Second)
	err = migrations.Up(upCtx, iso.DB)
	upCancel()
	if err != nil {
		t.Fatalf("Up while goose's default lock is held: %v", err)
	}
	advisory("pg_advisory_unlock", lock.DefaultLockID)
	if err := migrations.DownTo(ctx, iso.DB, 0); err != nil {
		t.Fatal(err)
	}

	// dblock's own lock held: a run cannot start until it is free.
	advisory("pg_advisory_lock", migrations.LockID)
	upCtx, upCancel = context.WithTimeout(ctx, 1200*time.Millisecond)
	err = migrations.Up(upCtx, iso.DB)
	upCancel()
	if err == nil {
		t.Fatal("Up ran while another run held migrations.LockID")
	}
	if got := columns(t, iso.DB, "dblock_locks"); len(got) != 0 {
		t.Fatalf("Up without the lock created dblock_locks")
	}
	advisory("pg_advisory_unlock", migrations.LockID)
	if err := migrations.Up(ctx, iso.DB); err != nil {
		t.Fatalf("Up once the lock is free: %v", err)
	}
}
