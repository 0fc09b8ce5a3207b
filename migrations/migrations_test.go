package migrations_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/migrations"
)

// expectedColumns is the schema the code's statements rely on. A migration
// that drifts from it fails TestSchemaMatchesCode on every dialect.
var expectedColumns = map[string][]string{
	"dblock_locks":   {"acquired_at", "expires_at", "metadata", "mode", "name", "owner", "reentry", "updated_at", "version"},
	"dblock_waiters": {"created_at", "expires_at", "heartbeat_at", "id", "name", "owner"},
}

func columns(t *testing.T, db *dialect.DB, table string) []string {
	t.Helper()
	ctx := context.Background()
	var cols []string
	var err error
	switch db.Dialect.Kind() {
	case dialect.Postgres:
		err = db.SelectContext(ctx, &cols, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1`, table)
	case dialect.MySQL:
		err = db.SelectContext(ctx, &cols, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = DATABASE() AND table_name = ?`, table)
	case dialect.SQLite:
		err = db.SelectContext(ctx, &cols, `SELECT name FROM pragma_table_info(?1)`, table)
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

func TestSchemaMatchesCode(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		for table, want := range expectedColumns {
			if got := columns(t, iso.DB, table); !slices.Equal(got, want) {
				t.Errorf("%s columns = %v, want %v", table, got, want)
			}
		}
		if err := migrations.Check(context.Background(), iso.DB); err != nil {
			t.Fatalf("Check after Up: %v", err)
		}
	})
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
	_, rest, err := dialect.ParseDSN(iso.DSN)
	if err != nil {
		t.Fatal(err)
	}
	switch iso.Kind {
	case dialect.Postgres:
		return "postgres", rest
	case dialect.MySQL:
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

			dir := filepath.Join(".", migrations.Dir(kind))
			run("-dir", dir, "-table", migrations.VersionTable, driver, dsn, "up")
			if err := migrations.Check(context.Background(), iso.DB); err != nil {
				t.Fatalf("after goose up: %v", err)
			}
			run("-dir", dir, "-table", migrations.VersionTable, driver, dsn, "down-to", "0")
			if got := columns(t, iso.DB, "dblock_locks"); len(got) != 0 {
				t.Fatalf("dblock_locks still there after down-to 0: %v", got)
			}
			run("-dir", dir, "-table", migrations.VersionTable, driver, dsn, "up")
			for table, want := range expectedColumns {
				if got := columns(t, iso.DB, table); !slices.Equal(got, want) {
					t.Errorf("after CLI round trip %s columns = %v, want %v", table, got, want)
				}
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
