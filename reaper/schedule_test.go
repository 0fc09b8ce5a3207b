package reaper

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// get fetches path from srv and returns the status and body.
func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatalf("request %s: %v", path, err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

func TestScheduleRunsPassesAndStops(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		stale := randomName("stale")
		acquire(t, db, stale, "o", time.Hour)
		expire(t, db, stale, -time.Hour)

		passes := make(chan Stats, 100)
		r := newReaper(t, db, &Config{Schedule: "@every 1s", Hooks: &Hooks{OnPass: func(st Stats, err error) {
			if err == nil {
				select {
				case passes <- st:
				default:
				}
			}
		}}})
		srv := httptest.NewServer(r.Handler())
		defer srv.Close()

		// Before any pass: healthy, counters at zero.
		if code, body := get(t, srv, "/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("healthz before a pass: %d %q", code, body)
		}
		if _, body := get(t, srv, "/metrics"); !strings.Contains(body, "dblock_reaper_passes_total 0\n") {
			t.Fatalf("metrics before a pass:\n%s", body)
		}

		r.Start()
		r.Start() // A second Start does nothing.
		select {
		case st := <-passes:
			if !st.Worked || st.ExpiredFreed != 1 || st.OldestStale < 59*time.Minute {
				t.Fatalf("first scheduled pass: %+v, want it to find and free the lease stale for an hour", st)
			}
		case <-time.After(time.Minute):
			t.Fatal("hang guard: no scheduled pass within a minute")
		}
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.Stop(stopCtx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if err := r.Stop(stopCtx); err != nil {
			t.Fatalf("second Stop: %v", err)
		}

		code, body := get(t, srv, "/metrics")
		if code != http.StatusOK {
			t.Fatalf("metrics status %d", code)
		}
		for _, want := range []string{
			"# TYPE dblock_reaper_rows_total counter\n",
			`dblock_reaper_rows_total{kind="expired_freed"} 1` + "\n",
			`dblock_reaper_rows_total{kind="waiters_deleted"} 0` + "\n",
			`dblock_reaper_rows_total{kind="idle_deleted"} 0` + "\n",
			"dblock_reaper_errors_total 0\n",
			"# TYPE dblock_reaper_pass_duration_seconds gauge\n",
			"dblock_reaper_locks_held 0\n",
			"dblock_reaper_waiters 0\n",
			"dblock_reaper_dead_waiters 0\n",
		} {
			if !strings.Contains(body, want) {
				t.Fatalf("metrics lack %q:\n%s", want, body)
			}
		}
		if strings.Contains(body, "dblock_reaper_passes_total 0\n") {
			t.Fatalf("metrics count no pass:\n%s", body)
		}
		if code, body := get(t, srv, "/healthz"); code != http.StatusOK {
			t.Fatalf("healthz after passes: %d %q", code, body)
		}
		if code, _ := get(t, srv, "/nothing"); code != http.StatusNotFound {
			t.Fatalf("unknown path: %d, want 404", code)
		}
	})
}

func TestHealthzFailsAfterFailedPass(t *testing.T) {
	t.Parallel()
	iso := dbtest.NewEmpty(t, store.SQLite) // No tables.
	r := newReaper(t, iso.DB, nil)
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.RunOnce(ctx); !errors.Is(err, dblock.ErrSchemaMissing) {
		t.Fatalf("RunOnce without tables: %v, want ErrSchemaMissing", err)
	}
	code, body := get(t, srv, "/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "last pass failed") {
		t.Fatalf("healthz: %d %q, want 503 naming the failed pass", code, body)
	}
	if _, body := get(t, srv, "/metrics"); !strings.Contains(body, "dblock_reaper_errors_total 1\n") {
		t.Fatalf("metrics do not count the failed pass:\n%s", body)
	}
}

// TestHealthzToleratesOneFailedPass starts a Reaper whose first scheduled
// pass fails (a hook panics): /healthz stays 200, since a pass succeeded (or
// the reaper started) less than three scheduled runs ago.
func TestHealthzToleratesOneFailedPass(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	var first atomic.Bool
	results := make(chan error, 100)
	r := newReaper(t, iso.DB, &Config{Schedule: "@every 1s", Hooks: &Hooks{
		OnPassStart: func(dblock.Token) {
			if first.CompareAndSwap(false, true) {
				panic("first pass fails")
			}
		},
		OnPass: func(_ Stats, err error) {
			select {
			case results <- err:
			default:
			}
		},
	}})
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	r.Start()
	defer func() { _ = r.Stop(context.Background()) }()
	select {
	case err := <-results:
		if err == nil {
			t.Fatal("first pass succeeded, want the hook's panic")
		}
	case <-time.After(time.Minute):
		t.Fatal("hang guard: no pass")
	}
	if code, body := get(t, srv, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz after one failed pass: %d %q, want 200", code, body)
	}
	select {
	case err := <-results:
		if err != nil {
			t.Fatalf("second pass: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("hang guard: no second pass")
	}
	if code, body := get(t, srv, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz after a good pass: %d %q", code, body)
	}
}

// TestHealthzFailsWithoutSuccess starts a Reaper on a database without
// tables, so every pass fails: /healthz is 200 at first, and 503 naming the
// missing success once three scheduled runs went by without one.
func TestHealthzFailsWithoutSuccess(t *testing.T) {
	t.Parallel()
	iso := dbtest.NewEmpty(t, store.SQLite)
	r := newReaper(t, iso.DB, &Config{Schedule: "@every 1s"})
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	r.Start()
	defer func() { _ = r.Stop(context.Background()) }()
	if code, body := get(t, srv, "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz right after Start: %d %q, want 200", code, body)
	}
	guard := time.Now().Add(time.Minute)
	for {
		code, body := get(t, srv, "/healthz")
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "no pass succeeded") || !strings.Contains(body, "schema missing") {
				t.Fatalf("healthz body %q, want the missing success and the last failure", body)
			}
			break
		}
		if time.Now().After(guard) {
			t.Fatalf("hang guard: healthz still %d %q", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestHealthzFailsWhenDatabaseDown(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.Postgres)
	db := iso.Open(t)
	r := newReaper(t, db, nil)
	runOnce(t, r)
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	_ = db.Close()
	code, body := get(t, srv, "/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "ping") {
		t.Fatalf("healthz with the pool closed: %d %q, want 503 naming the ping", code, body)
	}
}

func TestStopLetsTheBatchFinish(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		started := make(chan struct{})
		proceed := make(chan struct{})
		ended := make(chan Stats, 1)
		r := newReaper(t, db, &Config{Schedule: "@every 1s", Hooks: &Hooks{
			OnPassStart: func(dblock.Token) {
				select {
				case <-started:
					return // Only the first pass blocks.
				default:
				}
				close(started)
				<-proceed
			},
			OnPass: func(st Stats, err error) {
				if st.Worked {
					select {
					case ended <- st:
					default:
					}
				}
			},
		}})
		r.Start()
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("hang guard: no pass started")
		}
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stopped <- r.Stop(ctx)
		}()
		for !r.isStopping() {
			time.Sleep(time.Millisecond) // Stop marks the reaper stopping before it waits.
		}
		close(proceed)
		if err := <-stopped; err != nil {
			t.Fatalf("Stop: %v", err)
		}
		st := <-ended
		if !st.Stopped {
			t.Fatalf("pass not ended by Stop: %+v", st)
		}
		if h := holder(t, db, LeaseName); h.Held() {
			t.Fatalf("reaper lease still held after Stop: %+v", h)
		}
	})
}

// TestStartRunsAPassAtOnce: a reaper started with an hourly schedule runs
// its first pass at once, not an hour later.
func TestStartRunsAPassAtOnce(t *testing.T) {
	t.Parallel()
	iso := dbtest.New(t, store.SQLite)
	started := make(chan struct{}, 1)
	r := newReaper(t, iso.DB, &Config{Schedule: "@every 1h", Hooks: &Hooks{
		OnPassStart: func(dblock.Token) {
			select {
			case started <- struct{}{}:
			default:
			}
		},
	}})
	r.Start()
	defer func() { _ = r.Stop(context.Background()) }()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no pass began after Start with an hourly schedule")
	}
}
