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
	family(metricOldestStale, "gauge", "Seconds since the oldest lease still in the table expired, at the end of the last pass.")
	sample(metricOldestStale, "", m.oldestStale)
	family(metricLocksHeld, "gauge", "Unexpired leases at the end of the last pass.")
	sample(metricLocksHeld, "", m.locksHeld)
	family(metricWaiters, "gauge", "Fair-queue waiters at the end of the last pass.")
	sample(metricWaiters, "", m.waiters)
	family(metricLastSuccess, "gauge", "Unix time of the last successful pass (0 before the first).")
	sample(metricLastSuccess, "", m.lastSuccess)
	_, err := w.Write(b)
	return err
}

// Handler serves /metrics (Prometheus text exposition format) and /healthz:
// 200 "ok" when the last pass succeeded (or none ran yet) and the database
// answers a ping, 503 with the reason otherwise. Mount it on a server of
// your own, e.g. http.ListenAndServe(addr, r.Handler()).
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

// Healthy returns nil when the last pass succeeded (or none ran yet) and the
// database answers a ping, and the reason otherwise.
func (r *Reaper) Healthy(ctx context.Context) error {
	r.mu.Lock()
	lastErr := r.lastErr
	r.mu.Unlock()
	if lastErr != nil {
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
