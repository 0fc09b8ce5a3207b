package migrations_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/migrations"
)

// childDSN, when set, makes the test binary a migrating child process: it
// opens the DSN, runs migrations.Up, and exits 0 on success.
const childDSN = "DBLOCK_MIGRATE_CHILD_DSN"

func TestMain(m *testing.M) {
	if dsn := os.Getenv(childDSN); dsn != "" {
		os.Exit(migrateChild(dsn))
	}
	os.Exit(m.Run())
}

func migrateChild(dsn string) int {
	if err := migrateUp(dsn); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func migrateUp(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := dialect.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return migrations.Up(ctx, db)
}

// TestConcurrentUp: replicas that migrate as they start, all at once, on a
// fresh database: six OS processes and six goroutines (own pools) run Up
// together; every one succeeds and the schema is complete.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.NewEmpty(t, kind)
			const n = 6
			var wg sync.WaitGroup
			errs := make([]error, 2*n)
			for i := range n {
				wg.Add(2)
				go func() {
					defer wg.Done()
					cmd := exec.Command(os.Args[0], "-test.run=^$")
					cmd.Env = append(os.Environ(), childDSN+"="+iso.DSN)
					if out, err := cmd.CombinedOutput(); err != nil {
						errs[i] = fmt.Errorf("process %d: %v: %s", i, err, strings.TrimSpace(string(out)))
					}
				}()
				go func() {
					defer wg.Done()
					if err := migrateUp(iso.DSN); err != nil {
						errs[n+i] = fmt.Errorf("goroutine %d: %w", i, err)
					}
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := migrations.Check(ctx, iso.DB); err != nil {
				t.Fatalf("schema after concurrent runs: %v", err)
			}
		})
	}
}
