package deps_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// drivers are the import paths of the database drivers, by prefix.
var drivers = []string{"github.com/jackc/pgx", "github.com/go-sql-driver/mysql", "modernc.org/sqlite"}

// goTool returns the go command: the one `go env GOROOT` of the PATH's go
// names, as go test runs it.
func goTool() string {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		if p := filepath.Join(strings.TrimSpace(string(out)), "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestLockPackagesLinkNoDriver: the packages a user imports for locks link
// no driver; only dialect/<database> does, and each only its own.
func TestLockPackagesLinkNoDriver(t *testing.T) {
	want := map[string]string{
		"github.com/dblock-go/dblock":                  "",
		"github.com/dblock-go/dblock/dialect":          "",
		"github.com/dblock-go/dblock/optimistic":       "",
		"github.com/dblock-go/dblock/pessimistic":      "",
		"github.com/dblock-go/dblock/fairqueue":        "",
		"github.com/dblock-go/dblock/election":         "",
		"github.com/dblock-go/dblock/reaper":           "",
		"github.com/dblock-go/dblock/userrows":         "",
		"github.com/dblock-go/dblock/migrations":       "",
		"github.com/dblock-go/dblock/dialect/postgres": "github.com/jackc/pgx",
		"github.com/dblock-go/dblock/dialect/mysql":    "github.com/go-sql-driver/mysql",
		"github.com/dblock-go/dblock/dialect/sqlite":   "modernc.org/sqlite",
	}
	for pkg, own := range want {
		out, err := exec.Command(goTool(), "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, d := range drivers {
				if strings.HasPrefix(dep, d) && d != own {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}

// maxSizeRatio is the bound on the smallest PostgreSQL program's size over
// pgxpool's alone.
const maxSizeRatio = 1.3

// TestPostgresProgramSize builds testdata/minimal (dialect.Open, the
// PostgreSQL package, optimistic.TryAcquire) and testdata/pgxpool (pgxpool
// alone) and bounds the ratio of their sizes.
func TestPostgresProgramSize(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED: builds two programs; not in -short")
	}
	dir := t.TempDir()
	size := func(name string) int64 {
		out := filepath.Join(dir, name)
		cmd := exec.Command(goTool(), "build", "-o", out, "./testdata/"+name)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, b)
		}
		fi, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	minimal, floor := size("minimal"), size("pgxpool")
	ratio := float64(minimal) / float64(floor)
	t.Logf("minimal dblock program on PostgreSQL: %d bytes; pgxpool alone: %d bytes; ratio %.2f (bound %.2f)",
		minimal, floor, ratio, maxSizeRatio)
	if ratio > maxSizeRatio {
		t.Errorf("the minimal PostgreSQL program is %.2f× pgxpool's size, over the bound %.2f×", ratio, maxSizeRatio)
	}
}
