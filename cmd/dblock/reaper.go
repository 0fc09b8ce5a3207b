package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock/reaper"
)

const reaperHelp = `Usage: dblock [--dsn DSN] reaper [--schedule CRON] [--once] [--metrics-addr ADDR] [--history-retention DUR]

Cleans up after holders that went away: frees leases that expired by the
database clock (waking their waiters), deletes fair-queue waiters whose
heartbeat stopped, and deletes lock rows idle for more than 24h (fencing
tokens stay increasing). Every statement is bounded, so lock traffic never
waits for it. Several replicas are safe: a pass runs only while its replica
holds the reaper's own lock ("dblock:reaper"). Run it as a sidecar.

Flags:
  --schedule CRON       when to run passes, in UTC: five cron fields
                        ("*/5 * * * *"), a descriptor ("@hourly") or an
                        interval ("@every 15s"); default "@every 15s"
  --once                run one pass now, print what it did, and exit
  --metrics-addr ADDR   serve Prometheus metrics on http://ADDR/metrics and a
                        health check on http://ADDR/healthz (e.g. :9090)
  --history-retention DUR
                        delete the entries of the acquisition history (dblock
                        history) that ended longer than DUR ago (default: keep)

SIGTERM or SIGINT stops it gracefully, with --once too: the running pass
finishes its batch, releases the reaper lock, and dblock exits 0. A bad schedule exits 64,
missing tables 78, an unreachable database 69, all at start.

Examples:
  dblock reaper --metrics-addr :9090
  dblock reaper --schedule '*/1 * * * *'
  dblock reaper --once            # from cron, or by hand after an incident
  docker run --rm -e DBLOCK_DSN=postgres://... dblock reaper --metrics-addr :9090
`

const (
	// reaperStopTimeout bounds the graceful stop: the running batch, the
	// release of the reaper lock, and the metrics server's shutdown.
	reaperStopTimeout = 30 * time.Second
	// readHeaderTimeout protects the metrics server from slow clients.
	readHeaderTimeout = 5 * time.Second
)

// reaperCmd is one `dblock reaper` invocation: its flags, then its steps.
type reaperCmd struct {
	a                *app
	schedule         string
	once             bool
	metricsAddr      string
	historyRetention time.Duration
	logger           *slog.Logger
}

func (a *app) reaper(ctx context.Context, args []string) error {
	c := &reaperCmd{a: a}
	if done, err := c.parse(args); done {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	db, err := a.open(ctx, schemaRequired)
	if err != nil {
		return err
	}
	defer db.Close()
	c.logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := reaper.New(db, &reaper.Config{Schedule: c.schedule, Logger: c.logger, HistoryRetention: c.historyRetention})
	if err != nil {
		return err
	}
	if err := r.Check(ctx); err != nil {
		return a.schemaError(err)
	}
	if c.once {
		return c.runOnce(ctx, r)
	}
	return c.serve(ctx, r)
}

// parse reads and checks the flags before anything connects, so a typo is
// reported as such even when the database is down. done reports that the
// command ends here (help printed, or err).
func (c *reaperCmd) parse(args []string) (done bool, err error) {
	fs := flag.NewFlagSet("reaper", flag.ContinueOnError)
	fs.StringVar(&c.schedule, "schedule", reaper.ScheduleDefault, "cron schedule")
	fs.BoolVar(&c.once, "once", false, "run one pass and exit")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "listen address for /metrics and /healthz")
	fs.DurationVar(&c.historyRetention, "history-retention", 0, "prune history entries older than DUR")
	if done, err := c.a.parseFlags(fs, reaperHelp, args); done {
		return true, err
	}
	switch {
	case fs.NArg() > 0:
		return true, usageErrorf("reaper: unexpected argument %q (see dblock reaper --help)", fs.Arg(0))
	case c.historyRetention < 0:
		return true, usageErrorf("reaper: --history-retention must not be negative, got %v", c.historyRetention)
	}
	if _, err := cron.ParseStandard(c.schedule); err != nil {
		return true, usageErrorf("reaper: bad --schedule %q: %v (want five cron fields, a descriptor such as @hourly, or @every 15s)", c.schedule, err)
	}
	if c.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.metricsAddr); err != nil {
			return true, usageErrorf("reaper: bad --metrics-addr %q: %v (want host:port or :port)", c.metricsAddr, err)
		}
	}
	return false, nil
}

// runOnce runs one pass and prints what it did.
func (c *reaperCmd) runOnce(ctx context.Context, r *reaper.Reaper) error {
	st, err := c.a.reaperOnce(ctx, r, c.logger)
	if err != nil {
		return c.a.schemaError(err)
	}
	if st.Skipped {
		fmt.Fprintf(c.a.stdout, "skipped: another reaper holds %q\n", reaper.LeaseName)
		return nil
	}
	stopped := ""
	if st.Stopped {
		stopped = " (stopped early by a signal)"
	}
	fmt.Fprintf(c.a.stdout, "freed %d expired leases, deleted %d dead waiters, %d idle rows and %d history entries in %v%s\n",
		st.ExpiredFreed, st.WaitersDeleted, st.IdleDeleted, st.HistoryPruned, st.Duration.Round(time.Millisecond), stopped)
	return nil
}

// serve runs passes on the schedule (and the metrics server) until a
// signal, then stops gracefully.
func (c *reaperCmd) serve(ctx context.Context, r *reaper.Reaper) error {
	var (
		srv     *http.Server
		srvErrs = make(chan error, 1)
	)
	if c.metricsAddr != "" {
		ln, err := net.Listen("tcp", c.metricsAddr)
		if err != nil {
			return fmt.Errorf("reaper: metrics: %w", err)
		}
		srv = &http.Server{Handler: r.Handler(), ReadHeaderTimeout: readHeaderTimeout}
		go func() { srvErrs <- srv.Serve(ln) }()
		c.logger.Info("reaper: serving metrics", "addr", "http://"+ln.Addr().String(), "paths", "/metrics /healthz")
	}
	r.Start()
	c.logger.Info("reaper: started", "schedule", c.schedule, "pid", os.Getpid())

	var serveErr error
	select {
	case <-ctx.Done():
		c.logger.Info("reaper: stopping")
	case err := <-srvErrs:
		serveErr = fmt.Errorf("reaper: metrics server: %w", err)
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reaperStopTimeout)
	defer cancel()
	stopErr := r.Stop(stopCtx)
	if srv != nil {
		if err := srv.Shutdown(stopCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			stopErr = errors.Join(stopErr, err)
		}
	}
	if serveErr != nil {
		return serveErr
	}
	if stopErr != nil {
		return stopErr
	}
	c.logger.Info("reaper: stopped")
	return nil
}

// reaperOnce runs one pass. The pass does not run on ctx, which SIGTERM and
// SIGINT cancel: a signal makes it stop after its current batch (and release
// the reaper lock), as the scheduled reaper does, and only a batch still
// running after reaperStopTimeout is cancelled.
func (a *app) reaperOnce(ctx context.Context, r *reaper.Reaper, logger *slog.Logger) (reaper.Stats, error) {
	passCtx, cancelPass := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelPass()
	type outcome struct {
		st  reaper.Stats
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		st, err := r.RunOnce(passCtx)
		done <- outcome{st, err}
	}()
	select {
	case out := <-done:
		return out.st, out.err
	case <-ctx.Done():
	}
	logger.Info("reaper: stopping after the current batch")
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reaperStopTimeout)
	defer cancel()
	_ = r.Stop(stopCtx) // Without a schedule it only marks the pass to stop.
	select {
	case out := <-done:
		return out.st, out.err
	case <-stopCtx.Done():
		cancelPass()
		out := <-done
		return out.st, out.err
	}
}
