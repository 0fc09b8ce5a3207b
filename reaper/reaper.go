package reaper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/store"
)

// LeaseName is the name of the reaper's own lease: a pass runs only while its
// replica holds it, so several replicas never work at once.
const LeaseName = "dblock:reaper"

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
	// Owner is the pass's owner of the reaper lease (Config.Owner#pass id).
	Owner string
	// ExpiredFreed counts leases freed because they expired.
	ExpiredFreed int
	// WaitersDeleted counts fair-queue waiters deleted because their heartbeat stopped.
	WaitersDeleted int
	// IdleDeleted counts free rows deleted after Retention.
	IdleDeleted int
	// HistoryPruned counts history entries deleted after HistoryRetention.
	HistoryPruned int
	// SharesDeleted counts readers' shares (rwlock) deleted WaiterGrace
	// after they expired.
	SharesDeleted int
	// GrantsDeleted counts semaphore grants deleted WaiterGrace after they
	// expired.
	GrantsDeleted int
	// SemaphoresDeleted counts semaphores deleted after Retention without
	// a grant.
	SemaphoresDeleted int
	// Batches counts the statements (or transactions) that freed or deleted rows.
	Batches int
	// Duration is how long the pass took.
	Duration time.Duration
	// LocksHeld, Waiters, DeadWaiters and OldestStale describe the tables
	// as a pass that worked found them, read once it held the reaper lease
	// and before it changed anything: unexpired leases (not counting the
	// reaper's own), live fair-queue waiters, waiters whose heartbeat
	// deadline passed, and how long ago the oldest lease not yet freed
	// expired (how far the reaper is behind).
	LocksHeld   int64
	Waiters     int64
	DeadWaiters int64
	OldestStale time.Duration
}

// Reaper frees expired leases, deletes dead fair-queue waiters and deletes
// idle rows, on a cron schedule or one pass at a time. It is safe for
// concurrent use.
type Reaper struct {
	db        *store.DB
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
	startAt  time.Time // when Start ran
	stopped  bool
	rootCtx  context.Context
	cancel   context.CancelFunc
	stopping chan struct{} // closed by Stop: passes end after their current batch
	lastErr  error         // the last pass's error (nil when it succeeded)
	lastOK   time.Time     // the end of the last pass that succeeded or was skipped, or of a batch that succeeded
	passes   int
	// sqliteLimit is the batch size learned on SQLite (see writeBudgetLimit).
	sqliteLimit int
	// orphans are owners of earlier passes that may still hold the reaper
	// lease: their release failed, or their acquire's answer was lost. Each
	// pass owner is unique, so no later pass could re-enter such a lease,
	// and every pass would skip until it expired (see reclaim).
	orphans []string
}

// maxOrphans bounds Reaper.orphans; older entries have expired long since.
const maxOrphans = 8

// New returns a Reaper on db. cfg may be nil (every default). Configuration
// errors wrap dblock.ErrInvalidOption. New does not touch the database: call
// Check to verify the schema at start.
func New(handle *dialect.DB, cfg *Config) (*Reaper, error) {
	db := store.Of(handle)
	if db == nil {
		return nil, fmt.Errorf("reaper: %w: nil database", dblock.ErrInvalidOption)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	sched, leaseTTL, err := c.resolve()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(c.Telemetry)
	if err != nil {
		return nil, err
	}
	r := &Reaper{
		db: db, cfg: c, schedule: sched, leaseTTL: leaseTTL,
		log: mode.Logger(c.Logger), metrics: m, startedAt: time.Now(),
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

// Start runs a first pass at once, then passes on the schedule, in UTC, until Stop. A pass still running
// when the next is due makes that one skip; a panic in a pass is recovered and
// logged. Start after Start or Stop does nothing.
func (r *Reaper) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return
	}
	r.started = true
	r.startAt = time.Now()
	l := cronLogger{r.log}
	r.cron = cron.New(
		cron.WithLocation(time.UTC),
		cron.WithLogger(l),
		// Recover inside SkipIfStillRunning: cron v3's SkipIfStillRunning
		// gives its token back only when the job returns, so a panic passing
		// through it would make every later run skip.
		cron.WithChain(cron.SkipIfStillRunning(l), cron.Recover(l)),
	)
	r.cron.Schedule(&startNow{then: r.schedule}, cron.FuncJob(r.scheduled))
	r.cron.Start()
	r.log.DebugContext(r.rootCtx, "reaper: started", "schedule", r.cfg.Schedule, "owner", r.cfg.Owner)
}

// startNow is a cron schedule whose first run is at once (cron's next
// tick), then then's: a replica that starts cleans up at once rather than
// one interval later, and the first pass goes through the same chain
// (skip if running, recover) as every other.
type startNow struct {
	then cron.Schedule
	done bool // cron calls Next from its one goroutine.
}

func (s *startNow) Next(t time.Time) time.Time {
	if !s.done {
		s.done = true
		return t
	}
	return s.then.Next(t)
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
// pass when another pass, of this or another replica, holds it), reads the
// gauges, frees expired leases, deletes dead waiters and idle rows, and
// releases the lease. Each batch is bounded by Config.QueryTimeout and by the
// lease's local deadline; ctx and Stop are checked between batches. The
// error, if any, says which step failed; RunOnce returns it and does not log
// it. Missing tables give an error wrapping dblock.ErrSchemaMissing. A panic
// in the pass (in a hook, say) releases the lease, counts as a failed pass,
// and is re-raised.
func (r *Reaper) RunOnce(ctx context.Context) (st Stats, err error) {
	start := time.Now()
	var l *passLease
	defer func() {
		p := recover()
		if p != nil {
			err = fmt.Errorf("reaper: pass panicked: %v", p)
		}
		st.Duration = time.Since(start)
		r.finish(ctx, &st, l, err, p != nil)
		if p != nil {
			panic(p)
		}
	}()
	st, err = r.pass(ctx, start, &l)
	return st, err
}

// finish ends a pass: the OnPass hook, the release of the reaper lease (even
// if the hook panics), the metrics and the log line.
func (r *Reaper) finish(ctx context.Context, st *Stats, l *passLease, err error, panicked bool) {
	defer func() {
		if l != nil {
			if rerr := r.release(ctx, l); rerr != nil && err == nil {
				err = rerr
			}
		}
		r.record(*st, err)
		switch {
		case panicked:
		case st.Skipped:
			r.log.DebugContext(ctx, "reaper: pass skipped: another pass holds the reaper lease", "lock_key", LeaseName, "owner", st.Owner)
		case err == nil:
			level := slog.LevelInfo
			if st.ExpiredFreed+st.WaitersDeleted+st.IdleDeleted+st.HistoryPruned+st.SharesDeleted+st.GrantsDeleted+st.SemaphoresDeleted == 0 {
				level = slog.LevelDebug // Nothing to do: every 15 s by default, not worth an Info line.
			}
			r.log.Log(ctx, level, "reaper: pass done",
				"expired_freed", st.ExpiredFreed, "waiters_deleted", st.WaitersDeleted, "idle_deleted", st.IdleDeleted, "history_pruned", st.HistoryPruned,
				"shares_deleted", st.SharesDeleted, "grants_deleted", st.GrantsDeleted, "semaphores_deleted", st.SemaphoresDeleted,
				"duration", st.Duration, "stopped", st.Stopped, "owner", st.Owner, "token", int64(st.Token))
		}
	}()
	if h := r.hooks.OnPass; h != nil {
		h(*st, err)
	}
}

// passOwner returns a fresh owner for one pass: Config.Owner#16 hex digits.
func (r *Reaper) passOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return r.cfg.Owner + "#" + hex.EncodeToString(b[:])
}

// pass runs one pass, storing the reaper lease in *held as soon as it is
// taken, so that RunOnce releases it however the pass ends.
func (r *Reaper) pass(ctx context.Context, start time.Time, held **passLease) (st Stats, err error) {
	if err := ctx.Err(); err != nil {
		return st, fmt.Errorf("reaper: %w", err)
	}
	st.Owner = r.passOwner()
	res, err := r.takeLease(ctx, st.Owner)
	if err != nil {
		return st, err
	}
	if !res.Acquired {
		st.Skipped = true
		return st, nil
	}
	l, err := r.holdLease(st.Owner, res.Token, start)
	if err != nil {
		return st, err
	}
	*held = l
	st.Worked, st.Token = true, res.Token
	if h := r.hooks.OnPassStart; h != nil {
		h(res.Token)
	}
	if err := r.readGauges(ctx, l, &st); err != nil {
		return st, err
	}
	for _, s := range r.steps(&st) {
		if err := r.runStep(ctx, l, s, &st); err != nil || st.Stopped {
			return st, err
		}
	}
	return st, nil
}

// takeLease tries to take the reaper lease for owner; when an earlier pass
// of this Reaper left it held, it frees it and tries once more.
func (r *Reaper) takeLease(ctx context.Context, owner string) (store.AcquireResult, error) {
	res, err := r.acquireLease(ctx, owner)
	if err == nil && !res.Acquired && r.reclaim(ctx, res.Holder) {
		res, err = r.acquireLease(ctx, owner)
	}
	return res, err
}

// acquireLease is one bounded try at the reaper lease.
func (r *Reaper) acquireLease(ctx context.Context, owner string) (store.AcquireResult, error) {
	actx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	res, err := r.db.AcquireLease(actx, nil, store.AcquireParams{
		Name: LeaseName, Owner: owner, Mode: dblock.ModeOptimistic, TTL: r.leaseTTL, Metadata: "dblock reaper",
	})
	if err != nil {
		r.orphan(owner) // The acquire may have committed.
		return res, fmt.Errorf("reaper: take lease %q: %w", LeaseName, err)
	}
	return res, nil
}

// readGauges stores in st what the pass finds, read before it frees
// anything (the oldest stale age says how far behind the reaper is).
func (r *Reaper) readGauges(ctx context.Context, l *passLease, st *Stats) error {
	g, err := step(ctx, r, l, "read gauges", r.db.ReapGauges)
	if err != nil {
		return err
	}
	// The reaper's own lease is held while the gauges are read: leave it out.
	st.LocksHeld, st.Waiters, st.DeadWaiters, st.OldestStale = max(g.LocksHeld-1, 0), g.Waiters, g.DeadWaiters, g.OldestStale
	return nil
}

// steps lists the work of a pass, in order, counting into st.
func (r *Reaper) steps(st *Stats) []reapStep {
	steps := []reapStep{
		{"free expired leases", &st.ExpiredFreed, 0, r.db.ReapExpired},
		{"delete dead waiters", &st.WaitersDeleted, r.cfg.WaiterGrace, r.db.ReapWaiters},
		{"delete idle rows", &st.IdleDeleted, r.cfg.Retention, r.db.ReapIdle},
		{"delete expired shares", &st.SharesDeleted, r.cfg.WaiterGrace, r.db.ReapShares},
		{"delete expired grants", &st.GrantsDeleted, r.cfg.WaiterGrace, r.db.ReapGrants},
		{"delete idle semaphores", &st.SemaphoresDeleted, r.cfg.Retention, r.db.ReapSemaphores},
	}
	if r.cfg.HistoryRetention > 0 && r.db.HistorySupported() {
		steps = append(steps, reapStep{"prune history", &st.HistoryPruned, r.cfg.HistoryRetention, r.db.ReapHistory})
	}
	return steps
}

// runStep runs s in batches until it has nothing more to do, a batch fails,
// or Stop is called (st.Stopped). Where the database has one writer
// (SQLite), the batch size follows how long batches hold it.
func (r *Reaper) runStep(ctx context.Context, l *passLease, s reapStep, st *Stats) error {
	oneWriter := !r.db.Dialect.Caps().RowLocks
	p := store.ReapParams{Limit: r.cfg.BatchSize, Age: s.age}
	if oneWriter {
		p.Limit = r.writeLimit(0)
	}
	for more := true; more; {
		if r.isStopping() {
			st.Stopped = true
			return nil
		}
		began := time.Now()
		res, err := step(ctx, r, l, s.what, func(ctx context.Context) (store.ReapResult, error) { return s.run(ctx, p) })
		if err != nil {
			return err
		}
		if oneWriter {
			p.Limit = r.writeLimit(writeBudgetLimit(p.Limit, r.cfg.BatchSize, time.Since(began)))
		}
		*s.count += res.Rows
		if res.Rows > 0 {
			st.Batches++
		}
		r.progress()
		more = res.More
		if more {
			r.batchPause(ctx)
		}
	}
	return nil
}

// batchPause waits Config.BatchPause between two batches, or until ctx ends
// or Stop is called.
func (r *Reaper) batchPause(ctx context.Context) {
	if r.cfg.BatchPause <= 0 {
		return
	}
	t := time.NewTimer(r.cfg.BatchPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-r.stopping:
	case <-t.C:
	}
}

// reapStep is one kind of work of a pass, run in batches: what it is, where
// it counts its rows, the age it passes its statements, and its batch.
type reapStep struct {
	what  string
	count *int
	age   time.Duration
	run   func(context.Context, store.ReapParams) (store.ReapResult, error)
}

// batchAttempts bounds the tries of one batch that failed with a retryable
// error (a deadlock, or a fencing-floor raise that found the row locked for
// its whole time).
const batchAttempts = 3

// step runs one bounded batch (or statement) of a pass while the reaper lease
// holds, retrying retryable errors. The lease's Keeper renews it in the
// background; each attempt gets Config.QueryTimeout, cut short at the
// lease's local deadline and at its loss, so no attempt runs after the
// lease may have expired.
func step[T any](ctx context.Context, r *Reaper, l *passLease, what string, run func(context.Context) (T, error)) (T, error) {
	var zero T
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return zero, fmt.Errorf("reaper: %s: %w", what, err)
		}
		if err := l.lease.Err(); err != nil {
			return zero, fmt.Errorf("reaper: lease %q: %w", LeaseName, err)
		}
		res, cut, err := bounded(ctx, l, r.cfg.QueryTimeout, run)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return res, fmt.Errorf("reaper: %s: %w", what, ctx.Err())
		}
		if cut {
			return res, fmt.Errorf("reaper: %s: cut at the reaper lease's deadline: %w", what, l.lostErr())
		}
		if !store.IsRetryable(err) || attempt == batchAttempts {
			return res, fmt.Errorf("reaper: %s: %w", what, err)
		}
		r.log.WarnContext(ctx, "reaper: batch failed, retrying", "step", what, "attempt", attempt, "error", err)
		t := time.NewTimer(time.Duration(attempt) * 50 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// sqliteWriteBudget is how long one batch may hold SQLite's single write lock:
// a fifth of the 100 ms a lease acquisition waits for it, so acquisitions
// never time out behind a pass however slow the machine.
const sqliteWriteBudget = 20 * time.Millisecond

// writeLimit stores limit as the SQLite batch size learned so far, if it is
// positive, and returns the size to use: at first a sixteenth of the
// configured size, grown as batches prove fast.
func (r *Reaper) writeLimit(limit int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case limit > 0:
		r.sqliteLimit = limit
	case r.sqliteLimit == 0:
		r.sqliteLimit = max(r.cfg.BatchSize/16, 1)
	}
	return r.sqliteLimit
}

// writeBudgetLimit adapts a SQLite batch size to sqliteWriteBudget after a
// batch of limit rows took took: halved when over the budget, doubled when
// well under it, between a sixteenth of the configured size and the size (a
// batch's fixed cost, a commit's fsync, does not shrink with it).
func writeBudgetLimit(limit, size int, took time.Duration) int {
	switch {
	case took > sqliteWriteBudget:
		return max(limit/2, size/16, 1)
	case took < sqliteWriteBudget/2:
		return min(limit*2, size)
	}
	return limit
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// orphan remembers owner as one that may still hold the reaper lease.
func (r *Reaper) orphan(owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.orphans = append(r.orphans, owner)
	if len(r.orphans) > maxOrphans {
		r.orphans = r.orphans[len(r.orphans)-maxOrphans:]
	}
}

// reclaim frees the reaper lease when h, its holder, is an earlier pass of
// this Reaper whose release failed or whose acquire's answer was lost (a
// database restart in the middle of a pass): without it every pass would
// skip until the lease expired. It reports whether it freed the lease. The
// release is the usual CAS on (name, owner, token), so a lease that moved on
// meanwhile is left alone.
func (r *Reaper) reclaim(ctx context.Context, h store.Holder) bool {
	if h.Owner == "" {
		return false
	}
	r.mu.Lock()
	i := slices.Index(r.orphans, h.Owner)
	r.mu.Unlock()
	if i < 0 {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	ok, err := r.db.ReleaseLease(rctx, nil, LeaseName, h.Owner, dblock.Token(h.Version))
	if err != nil {
		return false // Tried again by the next pass.
	}
	r.mu.Lock()
	r.orphans = slices.DeleteFunc(r.orphans, func(o string) bool { return o == h.Owner })
	r.mu.Unlock()
	if ok {
		r.log.InfoContext(ctx, "reaper: freed the lease an earlier pass could not release", "lock_key", LeaseName, "owner", h.Owner)
	}
	return ok
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
	if err == nil {
		r.lastOK = time.Now()
	}
	r.mu.Unlock()
}

// progress notes a batch that succeeded: a long pass working off a backlog
// is healthy although it has not ended.
func (r *Reaper) progress() {
	r.mu.Lock()
	r.lastOK = time.Now()
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
