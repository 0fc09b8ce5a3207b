package reaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/telemetry"
)

// Row kinds of telemetry.ReaperRows (attribute "kind").
const (
	rowsExpiredFreed   = "expired_freed"
	rowsWaitersDeleted = "waiters_deleted"
	rowsIdleDeleted    = "idle_deleted"
	rowsHistoryPruned  = "history_pruned"
	rowsShares         = "shares_deleted"
	rowsGrants         = "grants_deleted"
	rowsSemaphores     = "semaphores_deleted"
)

// metrics records the reaper's instruments into two providers: the one of
// Config.Telemetry (or the global one), and the reaper's own SDK, whose
// Prometheus exporter serves Handler's /metrics. Both get the same
// instruments (obs.ReaperInstruments).
type metrics struct {
	mu       sync.Mutex
	sinks    []*obs.ReaperInstruments
	registry *prometheus.Registry
}

// newMetrics builds the reaper's own Prometheus-backed provider and the
// instruments in it and in cfg's provider.
func newMetrics(cfg *telemetry.Config) (*metrics, error) {
	m := &metrics{registry: prometheus.NewRegistry()}
	exp, err := otelprom.New(otelprom.WithRegisterer(m.registry), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, fmt.Errorf("reaper: metrics: %w", err)
	}
	// The reaper's own provider has a pull reader only: nothing runs in
	// the background, and nothing needs shutting down.
	providers := []metric.MeterProvider{sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)), nil}
	if cfg != nil && cfg.MeterProvider != nil {
		providers[1] = cfg.MeterProvider
	}
	for _, p := range providers {
		ins, err := obs.NewReaperInstruments(p, []string{rowsExpiredFreed, rowsWaitersDeleted, rowsIdleDeleted, rowsHistoryPruned, rowsShares, rowsGrants, rowsSemaphores})
		if err != nil {
			return nil, fmt.Errorf("reaper: metrics: %w", err)
		}
		m.sinks = append(m.sinks, ins)
	}
	return m, nil
}

// observe folds one pass into the instruments.
func (m *metrics) observe(st Stats, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ctx := context.Background()
	for _, s := range m.sinks {
		s.Rows(ctx, rowsExpiredFreed, st.ExpiredFreed)
		s.Rows(ctx, rowsWaitersDeleted, st.WaitersDeleted)
		s.Rows(ctx, rowsIdleDeleted, st.IdleDeleted)
		s.Rows(ctx, rowsHistoryPruned, st.HistoryPruned)
		s.Rows(ctx, rowsShares, st.SharesDeleted)
		s.Rows(ctx, rowsGrants, st.GrantsDeleted)
		s.Rows(ctx, rowsSemaphores, st.SemaphoresDeleted)
		switch {
		case err != nil:
			s.Failed(ctx)
		case st.Skipped:
			s.Skipped(ctx)
		default:
			s.Passed(ctx, obs.ReaperPass{Duration: st.Duration, OldestStale: st.OldestStale,
				LocksHeld: st.LocksHeld, Waiters: st.Waiters, DeadWaiters: st.DeadWaiters, At: time.Now()})
		}
	}
}

// Handler serves /metrics (the reaper's instruments in the Prometheus text
// exposition format, through OpenTelemetry's Prometheus exporter) and
// /healthz: 200 "ok" when Healthy returns nil, 503 with the reason
// otherwise. Mount it on a server of your own, e.g.
// http.ListenAndServe(addr, r.Handler()).
func (r *Reaper) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.metrics.registry, promhttp.HandlerOpts{}))
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
