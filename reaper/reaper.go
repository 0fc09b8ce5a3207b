package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
)

// Defaults of Config.
const (
	ScheduleDefault     = "@every 15s"
	BatchSizeDefault    = 1000
	RetentionDefault    = 24 * time.Hour
	WaiterGraceDefault  = 10 * time.Second
	QueryTimeoutDefault = 30 * time.Second
	BatchPauseDefault   = 100 * time.Millisecond

	// RetentionMin is the shortest Retention accepted. A deleted row's name
	// starts again from the fencing floor, so deletions must come long after
	// the row's last acquisition.
	RetentionMin = time.Minute
	// BatchSizeMax is the largest BatchSize accepted.
	BatchSizeMax = 10000
)

// LeaseName is the name of the reaper's own lease: a pass runs only while its
// replica holds it, so several replicas never work at once.
const LeaseName = "dblock:reaper"

// Config configures a Reaper. The zero value means "every default".
type Config struct {
	// Schedule is a cron spec: five standard fields ("*/5 * * * *"), a
	// descriptor ("@hourly") or an interval ("@every 15s"), evaluated in UTC.
	// Defaults to "@every 15s".
	Schedule string
	// BatchSize bounds the rows one statement frees or deletes (1 to 10000).
	// Defaults to 1000.
	BatchSize int
	// Retention is how long a free row stays before it is deleted (at least
	// one minute). Defaults to 24h.
	Retention time.Duration
	// WaiterGrace is how long past its heartbeat deadline a fair-queue waiter
	// is kept before it is deleted. Defaults to 10s.
	WaiterGrace time.Duration
	// BatchPause is the pause after each full batch, before the next, so a
	// large backlog is worked off without crowding out foreground locking; a
	// pass with less than a batch of work never pauses. Negative means no
	// pause. Defaults to 100ms.
	BatchPause time.Duration
	// QueryTimeout bounds each batch (and each statement on the reaper's own
	// lease). The reaper's lease lasts four times this and is renewed between
	// batches. Defaults to 30s.
	QueryTimeout time.Duration
	// Owner names this replica as the holder of the reaper lease. Defaults to
	// dblock.NewOwner().
	Owner string
	// Logger receives per-pass counts (Info), skipped passes and retries
	// (Debug, Warn) and failed scheduled passes (Error). Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observe passes, for metrics and tracing. Optional.
	Hooks *Hooks
}

// Hooks observe passes. Every field is optional. Hooks run synchronously on
// the pass's goroutine and must not block.
type Hooks struct {
	// OnPassStart is called when a pass has taken the reaper lease, before
	// its first batch.
	OnPassStart func(token dblock.Token)
	// OnPass is called at the end of every pass, with its stats and error;
	// when the pass worked, before the reaper lease is released.
	OnPass func(s Stats, err error)
}

// Stats describe one pass.
type Stats struct {
	// Worked reports whether the pass held the reaper lease and ran.
	Worked bool
	// Skipped reports whether another replica held the reaper lease.
	Skipped bool
	// Stopped reports whether Stop ended the pass early, after a batch.
	Stopped bool
	// Token is the reaper lease's fencing token when the pass worked.
	Token dblock.Token
	// ExpiredFreed counts leases freed because they expired.
	ExpiredFreed int
	// WaitersDeleted counts fair-queue waiters deleted because their heartbeat stopped.
	WaitersDeleted int
	// IdleDeleted counts free rows deleted after Retention.
	IdleDeleted int
	// Batches counts the statements (or transactions) that freed or deleted rows.
	Batches int
	// Duration is how long the pass took.
	Duration time.Duration
	// LocksHeld, Waiters and OldestStale are read at the end of a pass that
	// worked: unexpired leases (not counting the reaper's own), fair-queue
	// waiters, and how long ago the oldest lease still in the table expired.
	LocksHeld   int64
	Waiters     int64
	OldestStale time.Duration
}

// Reaper frees expired leases, deletes dead fair-queue waiters and deletes
// idle rows, on a cron schedule or one pass at a time. It is safe for
// concurrent use.
type Reaper struct {
	db        *dialect.DB
	cfg       Config
	schedule  cron.Schedule
	leaseTTL  time.Duration
	log       *slog.Logger
	hooks     Hooks
	metrics   *metrics
	startedAt time.Time

	mu       sync.Mutex
	cron     *cron.Cron
	started  bool
	stopped  bool
	rootCtx  context.Context
	cancel   context.CancelFunc
	stopping chan struct{} // closed by Stop: passes end after their current batch
	lastErr  error         // the last pass's error (nil when it succeeded)
	passes   int
}

// cronParser accepts five standard fields and descriptors (including @every).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// New returns a Reaper on db. cfg may be nil (every default). Configuration
// errors wrap dblock.ErrInvalidOption. New does not touch the database: call
// Check to verify the schema at start.
func New(db *dialect.DB, cfg *Config) (*Reaper, error) {
	if db == nil {
		return nil, fmt.Errorf("reaper: %w: nil database", dblock.ErrInvalidOption)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Schedule == "" {
		c.Schedule = ScheduleDefault
	}
	sched, err := cronParser.Parse(c.Schedule)
	if err != nil {
		return nil, fmt.Errorf("reaper: %w: schedule %q: %w (want five cron fields, a descriptor such as @hourly, or @every 15s)",
			dblock.ErrInvalidOption, c.Schedule, err)
	}
	switch {
	case c.BatchSize == 0:
		c.BatchSize = BatchSizeDefault
	case c.BatchSize < 0 || c.BatchSize > BatchSizeMax:
		return nil, fmt.Errorf("reaper: %w: batch size %d out of range [1, %d]", dblock.ErrInvalidOption, c.BatchSize, BatchSizeMax)
	}
	switch {
	case c.Retention == 0:
		c.Retention = RetentionDefault
	case c.Retention < RetentionMin:
		return nil, fmt.Errorf("reaper: %w: retention %v shorter than %v", dblock.ErrInvalidOption, c.Retention, RetentionMin)
	}
	switch {
	case c.WaiterGrace == 0:
		c.WaiterGrace = WaiterGraceDefault
	case c.WaiterGrace < 0:
		return nil, fmt.Errorf("reaper: %w: waiter grace %v is negative", dblock.ErrInvalidOption, c.WaiterGrace)
	}
	switch {
	case c.BatchPause == 0:
		c.BatchPause = BatchPauseDefault
	case c.BatchPause < 0:
		c.BatchPause = 0
	case c.BatchPause > time.Minute:
		return nil, fmt.Errorf("reaper: %w: batch pause %v longer than a minute", dblock.ErrInvalidOption, c.BatchPause)
	}
	switch {
	case c.QueryTimeout == 0:
		c.QueryTimeout = QueryTimeoutDefault
	case c.QueryTimeout < 10*time.Millisecond:
		return nil, fmt.Errorf("reaper: %w: query timeout %v shorter than 10ms", dblock.ErrInvalidOption, c.QueryTimeout)
	}
	leaseTTL := 4 * c.QueryTimeout
	if err := dblock.ValidateTTL(leaseTTL); err != nil {
		return nil, fmt.Errorf("reaper: query timeout %v: %w", c.QueryTimeout, err)
	}
	if c.Owner == "" {
		c.Owner = dblock.NewOwner()
	}
	if err := dblock.ValidateOwner(c.Owner); err != nil {
		return nil, fmt.Errorf("reaper: %w", err)
	}
	r := &Reaper{
		db: db, cfg: c, schedule: sched, leaseTTL: leaseTTL,
		log: dblock.LoggerOrDefault(c.Logger), metrics: newMetrics(), startedAt: time.Now(),
		stopping: make(chan struct{}),
	}
	if c.Hooks != nil {
		r.hooks = *c.Hooks
	}
	r.rootCtx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Config returns the configuration in effect, defaults filled in.
func (r *Reaper) Config() Config { return r.cfg }

// Check verifies that the tables exist: an error wrapping
// dblock.ErrSchemaMissing, whose message names the migrate command, when they
// do not.
func (r *Reaper) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	if err := r.db.ReapCheck(ctx); err != nil {
		return fmt.Errorf("reaper: check schema: %w", err)
	}
	return nil
}

// Start runs passes on the schedule, in UTC, until Stop. A pass still running
// when the next is due makes that one skip; a panic in a pass is recovered and
// logged. Start after Start or Stop does nothing.
func (r *Reaper) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return
	}
	r.started = true
	l := cronLogger{r.log}
	r.cron = cron.New(
		cron.WithLocation(time.UTC),
		cron.WithLogger(l),
		cron.WithChain(cron.Recover(l), cron.SkipIfStillRunning(l)),
	)
	r.cron.Schedule(r.schedule, cron.FuncJob(r.scheduled))
	r.cron.Start()
	r.log.DebugContext(r.rootCtx, "reaper: started", "schedule", r.cfg.Schedule, "owner", r.cfg.Owner)
}

// scheduled is the cron job: one pass on the root context, its failure logged.
func (r *Reaper) scheduled() {
	_, err := r.RunOnce(r.rootCtx)
	if err == nil || r.rootCtx.Err() != nil && errors.Is(err, context.Canceled) {
		return
	}
	r.log.ErrorContext(r.rootCtx, "reaper: pass failed", "owner", r.cfg.Owner, "error", err)
}

// Stop stops the schedule and waits for a running pass, which ends after its
// current batch and releases the reaper lease. If ctx ends first, the running
// batch is cancelled, Stop still waits for the pass to return, and the error
// wraps ctx's. Stop is idempotent; a stopped Reaper does not start again, and
// RunOnce on it ends before its first batch (Stats.Stopped).
func (r *Reaper) Stop(ctx context.Context) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	close(r.stopping)
	c := r.cron
	r.mu.Unlock()

	if c == nil {
		r.cancel()
		return nil
	}
	done := c.Stop()
	select {
	case <-done.Done():
		r.cancel()
		r.log.DebugContext(ctx, "reaper: stopped", "owner", r.cfg.Owner)
		return nil
	case <-ctx.Done():
		r.cancel()
		<-done.Done()
		return fmt.Errorf("reaper: stop: running pass cancelled: %w", context.Cause(ctx))
	}
}

func (r *Reaper) isStopping() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// RunOnce runs one pass now, on ctx: it takes the reaper lease (skipping the
// pass when another replica holds it), frees expired leases, deletes dead
// waiters and idle rows, reads the gauges and releases the lease. Each batch
// is bounded by Config.QueryTimeout and ctx is checked between batches. The
// error, if any, says which step failed; RunOnce returns it and does not log
// it. Missing tables give an error wrapping dblock.ErrSchemaMissing.
func (r *Reaper) RunOnce(ctx context.Context) (Stats, error) {
	start := time.Now()
	st, l, err := r.pass(ctx, start)
	st.Duration = time.Since(start)
	if h := r.hooks.OnPass; h != nil {
		h(st, err)
	}
	if l != nil {
		if rerr := r.release(ctx, l); rerr != nil && err == nil {
			err = rerr
		}
	}
	r.record(st, err)
	switch {
	case st.Skipped:
		r.log.DebugContext(ctx, "reaper: pass skipped: another replica holds the reaper lease", "lock_key", LeaseName, "owner", r.cfg.Owner)
	case err == nil:
		r.log.InfoContext(ctx, "reaper: pass done",
			"expired_freed", st.ExpiredFreed, "waiters_deleted", st.WaitersDeleted, "idle_deleted", st.IdleDeleted,
			"duration", st.Duration, "stopped", st.Stopped, "token", int64(st.Token))
	}
	return st, err
}

// lease is the reaper lease held by one pass.
type lease struct {
	token    dblock.Token
	acked    time.Time // local start of the last successful acquire or renew
	deadline time.Time // acked + TTL: past it the lease cannot be trusted
}

// pass runs one pass and returns the reaper lease it holds (nil if none), for
// RunOnce to release after the OnPass hook.
func (r *Reaper) pass(ctx context.Context, start time.Time) (st Stats, l *lease, err error) {
	if err := ctx.Err(); err != nil {
		return st, nil, fmt.Errorf("reaper: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	res, err := r.db.AcquireLease(actx, nil, dialect.AcquireParams{
		Name: LeaseName, Owner: r.cfg.Owner, Mode: dblock.ModeOptimistic, TTL: r.leaseTTL, Metadata: "dblock reaper",
	})
	cancel()
	if err != nil {
		return st, nil, fmt.Errorf("reaper: take lease %q: %w", LeaseName, err)
	}
	if !res.Acquired {
		st.Skipped = true
		return st, nil, nil
	}
	l = &lease{token: res.Token, acked: start, deadline: start.Add(r.leaseTTL)}
	st.Worked, st.Token = true, res.Token
	if h := r.hooks.OnPassStart; h != nil {
		h(l.token)
	}

	steps := []struct {
		what  string
		count *int
		age   time.Duration
		run   func(context.Context, dialect.ReapParams) (dialect.ReapResult, error)
	}{
		{"free expired leases", &st.ExpiredFreed, 0, r.db.ReapExpired},
		{"delete dead waiters", &st.WaitersDeleted, r.cfg.WaiterGrace, r.db.ReapWaiters},
		{"delete idle rows", &st.IdleDeleted, r.cfg.Retention, r.db.ReapIdle},
	}
	for _, s := range steps {
		for more := true; more; {
			if r.isStopping() {
				st.Stopped = true
				return st, l, nil
			}
			if err := r.keep(ctx, l); err != nil {
				return st, l, err
			}
			res, err := r.batch(ctx, s.what, s.run, dialect.ReapParams{Limit: r.cfg.BatchSize, Age: s.age})
			if err != nil {
				return st, l, err
			}
			*s.count += res.Rows
			if res.Rows > 0 {
				st.Batches++
			}
			more = res.More
			if more && r.cfg.BatchPause > 0 {
				select {
				case <-ctx.Done():
				case <-r.stopping:
				case <-time.After(r.cfg.BatchPause):
				}
			}
		}
	}
	gctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	g, err := r.db.ReapGauges(gctx)
	cancel()
	if err != nil {
		return st, l, fmt.Errorf("reaper: read gauges: %w", err)
	}
	// The reaper's own lease is held while the gauges are read: leave it out.
	st.LocksHeld, st.Waiters, st.OldestStale = max(g.LocksHeld-1, 0), g.Waiters, g.OldestStale
	return st, l, nil
}

// batchAttempts bounds the tries of one batch that failed with a retryable
// error (a deadlock, or a lock wait on the fencing floor that ran out).
const batchAttempts = 3

// batch runs one bounded batch under its own timeout, retrying retryable errors.
func (r *Reaper) batch(ctx context.Context, what string, run func(context.Context, dialect.ReapParams) (dialect.ReapResult, error), p dialect.ReapParams) (dialect.ReapResult, error) {
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return dialect.ReapResult{}, fmt.Errorf("reaper: %s: %w", what, err)
		}
		bctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		res, err := run(bctx, p)
		cancel()
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("reaper: %s: %w", what, ctx.Err())
		}
		if !dialect.IsRetryable(err) || attempt == batchAttempts {
			return res, fmt.Errorf("reaper: %s: %w", what, err)
		}
		r.log.WarnContext(ctx, "reaper: batch failed, retrying", "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// keep renews the reaper lease once a third of its TTL has passed, and
// refuses to go on once it can no longer be trusted.
func (r *Reaper) keep(ctx context.Context, l *lease) error {
	now := time.Now()
	if now.After(l.deadline) {
		return fmt.Errorf("reaper: lease %q: %w", LeaseName, &dblock.LostError{Name: LeaseName, Reason: dblock.ErrExpired})
	}
	if now.Sub(l.acked) < r.leaseTTL/3 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	ok, err := r.db.RenewLease(rctx, nil, LeaseName, r.cfg.Owner, l.token, r.leaseTTL)
	cancel()
	switch {
	case err != nil:
		return fmt.Errorf("reaper: renew lease %q: %w", LeaseName, err)
	case !ok:
		return fmt.Errorf("reaper: lease %q: %w", LeaseName, &dblock.LostError{Name: LeaseName, Reason: dblock.ErrTakenOver})
	}
	l.acked, l.deadline = now, now.Add(r.leaseTTL)
	return nil
}

// release gives the reaper lease back, even when ctx is done.
func (r *Reaper) release(ctx context.Context, l *lease) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
	defer cancel()
	ok, err := r.db.ReleaseLease(rctx, nil, LeaseName, r.cfg.Owner, l.token)
	if err != nil {
		return fmt.Errorf("reaper: release lease %q: %w", LeaseName, err)
	}
	if !ok {
		r.log.WarnContext(ctx, "reaper: lease was gone at release", "lock_key", LeaseName, "owner", r.cfg.Owner, "token", int64(l.token))
	}
	return nil
}

// record updates the metrics and the health state after a pass.
func (r *Reaper) record(st Stats, err error) {
	if err != nil && r.isStopping() && errors.Is(err, context.Canceled) {
		return // Cut short by shutdown: not a failure.
	}
	r.metrics.observe(st, err)
	r.mu.Lock()
	r.lastErr = err
	r.passes++
	r.mu.Unlock()
}

// cronLogger sends cron's messages to slog: its routine messages at Debug,
// its errors (a recovered panic) at Error.
type cronLogger struct{ l *slog.Logger }

func (c cronLogger) Info(msg string, keysAndValues ...any) {
	c.l.DebugContext(context.Background(), "reaper: cron: "+msg, keysAndValues...)
}

func (c cronLogger) Error(err error, msg string, keysAndValues ...any) {
	c.l.ErrorContext(context.Background(), "reaper: cron: "+msg, append([]any{"error", err}, keysAndValues...)...)
}
