package reaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
)

// Metric names, in the Prometheus text exposition format.
const (
	metricRows         = "dblock_reaper_rows_total"
	metricPasses       = "dblock_reaper_passes_total"
	metricErrors       = "dblock_reaper_errors_total"
	metricSkipped      = "dblock_reaper_skipped_passes_total"
	metricDuration     = "dblock_reaper_pass_duration_seconds"
	metricOldestStale  = "dblock_reaper_oldest_stale_age_seconds"
	metricLocksHeld    = "dblock_reaper_locks_held"
	metricWaiters      = "dblock_reaper_waiters"
	metricDeadWaiters  = "dblock_reaper_dead_waiters"
	metricLastSuccess  = "dblock_reaper_last_success_timestamp_seconds"
	rowsExpiredFreed   = "expired_freed"
	rowsWaitersDeleted = "waiters_deleted"
	rowsIdleDeleted    = "idle_deleted"
)

// metrics is a small registry of the reaper's counters and gauges, written in
// the Prometheus text exposition format (version 0.0.4). It needs no client
// library: the reaper's few series are fixed.
type metrics struct {
	mu          sync.Mutex
	rows        map[string]float64 // by kind
	passes      float64
	errors      float64
	skipped     float64
	duration    float64
	oldestStale float64
	locksHeld   float64
	waiters     float64
	deadWaiters float64
	lastSuccess float64 // Unix seconds; 0 until a pass succeeds
}

func newMetrics() *metrics {
	return &metrics{rows: map[string]float64{rowsExpiredFreed: 0, rowsWaitersDeleted: 0, rowsIdleDeleted: 0}}
}

// observe folds one pass into the metrics.
func (m *metrics) observe(st Stats, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows[rowsExpiredFreed] += float64(st.ExpiredFreed)
	m.rows[rowsWaitersDeleted] += float64(st.WaitersDeleted)
	m.rows[rowsIdleDeleted] += float64(st.IdleDeleted)
	switch {
	case err != nil:
		m.errors++
	case st.Skipped:
		m.skipped++
	default:
		m.passes++
		m.duration = st.Duration.Seconds()
		m.oldestStale = st.OldestStale.Seconds()
		m.locksHeld = float64(st.LocksHeld)
		m.waiters = float64(st.Waiters)
		m.deadWaiters = float64(st.DeadWaiters)
		m.lastSuccess = float64(time.Now().UnixMicro()) / 1e6
	}
}

// writeText writes every series in the text exposition format.
func (m *metrics) writeText(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b []byte
	family := func(name, typ, help string) {
		b = fmt.Appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	sample := func(name, labels string, v float64) {
		b = append(b, name...)
		b = append(b, labels...)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
		b = append(b, '\n')
	}
	family(metricRows, "counter", "Rows the reaper freed or deleted, by kind.")
	for _, kind := range []string{rowsExpiredFreed, rowsWaitersDeleted, rowsIdleDeleted} {
		sample(metricRows, `{kind="`+kind+`"}`, m.rows[kind])
	}
	family(metricPasses, "counter", "Passes that held the reaper lease and succeeded.")
	sample(metricPasses, "", m.passes)
	family(metricErrors, "counter", "Passes that failed.")
	sample(metricErrors, "", m.errors)
	family(metricSkipped, "counter", "Passes skipped because another replica held the reaper lease.")
	sample(metricSkipped, "", m.skipped)
	family(metricDuration, "gauge", "Duration of the last successful pass, in seconds.")
	sample(metricDuration, "", m.duration)
	family(metricOldestStale, "gauge", "Seconds since the oldest lease not yet freed expired, as the last successful pass found it (how far behind the reaper is).")
	sample(metricOldestStale, "", m.oldestStale)
	family(metricLocksHeld, "gauge", "Unexpired leases, as the last successful pass found them.")
	sample(metricLocksHeld, "", m.locksHeld)
	family(metricWaiters, "gauge", "Live fair-queue waiters, as the last successful pass found them.")
	sample(metricWaiters, "", m.waiters)
	family(metricDeadWaiters, "gauge", "Fair-queue waiters whose heartbeat stopped, as the last successful pass found them (before deleting them).")
	sample(metricDeadWaiters, "", m.deadWaiters)
	family(metricLastSuccess, "gauge", "Unix time of the last successful pass (0 before the first).")
	sample(metricLastSuccess, "", m.lastSuccess)
	_, err := w.Write(b)
	return err
}

// Handler serves /metrics (Prometheus text exposition format) and /healthz:
// 200 "ok" when Healthy returns nil, 503 with the reason otherwise. Mount it
// on a server of your own, e.g. http.ListenAndServe(addr, r.Handler()).
func (r *Reaper) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = r.metrics.writeText(w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := r.Healthy(req.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

// healthPingTimeout bounds the database ping of a health check.
const healthPingTimeout = 2 * time.Second

// HealthyRuns is how many scheduled runs may pass without a success before a
// started Reaper reports itself unhealthy.
const HealthyRuns = 3

// Healthy returns nil when the reaper does its job and the database answers
// a ping, and the reason otherwise. A started Reaper does its job while some
// pass succeeded (or was skipped because another replica holds the reaper
// lease), or some batch of a long pass succeeded, no longer ago than
// HealthyRuns scheduled runs (counted from Start before the first success):
// one failed pass, a database restart say, does not make it unhealthy, three
// in a row do. A Reaper that was not started (RunOnce only) does its job
// unless its last pass failed.
func (r *Reaper) Healthy(ctx context.Context) error {
	r.mu.Lock()
	started, lastErr, lastOK := r.started && !r.stopped, r.lastErr, r.lastOK
	if lastOK.IsZero() {
		lastOK = r.startAt
	}
	r.mu.Unlock()
	switch {
	case started:
		due := lastOK
		for range HealthyRuns {
			due = r.schedule.Next(due)
		}
		if now := time.Now(); now.After(due) {
			err := fmt.Errorf("reaper: no pass succeeded since %s (%d scheduled runs)", lastOK.UTC().Format(time.RFC3339), HealthyRuns)
			if lastErr != nil {
				err = fmt.Errorf("%w; last pass failed: %w", err, lastErr)
			}
			return err
		}
	case lastErr != nil:
		return fmt.Errorf("reaper: last pass failed: %w", lastErr)
	}
	ctx, cancel := context.WithTimeout(ctx, healthPingTimeout)
	defer cancel()
	if err := r.db.PingContext(ctx); err != nil {
		if !errors.Is(err, dblock.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", dblock.ErrUnavailable, err)
		}
		return fmt.Errorf("reaper: database ping: %w", err)
	}
	return nil
}
