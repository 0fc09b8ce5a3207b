package reaper_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/sqlite" // The example runs on an SQLite file.
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
	"github.com/dblock-go/dblock/reaper"
)

// One pass over an SQLite database: a lease whose holder vanished is freed,
// a live one is left alone.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "dblock-reaper-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := dialect.Open(ctx, "sqlite://"+filepath.Join(dir, "dblock.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil {
		fmt.Println(err)
		return
	}

	// A holder that took "report:daily" for 10ms and vanished, and one that
	// holds "invoice:42" for an hour.
	for name, ttl := range map[string]time.Duration{"report:daily": 10 * time.Millisecond, "invoice:42": time.Hour} {
		if _, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: "worker-1", Mode: dblock.ModeOptimistic, TTL: ttl}); err != nil {
			fmt.Println(err)
			return
		}
	}
	time.Sleep(50 * time.Millisecond) // Let the short lease run out.

	r, err := reaper.New(db, &reaper.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := r.Check(ctx); err != nil {
		fmt.Println(err)
		return
	}
	st, err := r.RunOnce(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("expired leases freed: %d, waiters deleted: %d, idle rows deleted: %d, locks held: %d\n",
		st.ExpiredFreed, st.WaitersDeleted, st.IdleDeleted, st.LocksHeld)
	// Output:
	// expired leases freed: 1, waiters deleted: 0, idle rows deleted: 0, locks held: 1
}

// runSidecar is the package documentation's sidecar, word for word
// (TestDocsCompile in the root package checks that it stays so).
func runSidecar(ctx context.Context, db *dialect.DB, logger *slog.Logger, mux *http.ServeMux) error {
	r, err := reaper.New(db, &reaper.Config{Schedule: "@every 15s", Logger: logger})
	if err != nil {
		return err
	}
	if err := r.Check(ctx); err != nil {
		return err // dblock.ErrSchemaMissing: run the migrations
	}
	mux.Handle("/", r.Handler()) // /metrics and /healthz, on your HTTP server
	r.Start()
	<-ctx.Done()                        // SIGTERM
	return r.Stop(context.Background()) // the running batch finishes
}

// The sidecar of the package documentation, stopped soon after it started.
func Example_sidecar() {
	dir, err := os.MkdirTemp("", "dblock-reaper-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := dialect.Open(ctx, "sqlite://"+filepath.Join(dir, "dblock.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil {
		fmt.Println(err)
		return
	}
	time.AfterFunc(50*time.Millisecond, cancel) // SIGTERM, soon
	err = runSidecar(ctx, db, slog.New(slog.DiscardHandler), http.NewServeMux())
	fmt.Println("stopped:", err)
	// Output:
	// stopped: <nil>
}
