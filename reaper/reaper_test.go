package reaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

func TestPassFreesStaleKeepsLive(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		live, stale := randomName("live"), randomName("stale")
		liveToken := acquire(t, db, live, "owner-live", time.Hour)
		acquire(t, db, stale, "owner-stale", time.Hour)
		expire(t, db, stale, -time.Hour)
		before := holder(t, db, live)

		q := randomName("queue")
		dbtest.AddWaiter(t, db, q, "w-live", time.Hour)
		dbtest.AddWaiter(t, db, q, "w-dead", -time.Hour)
		dbtest.AddWaiter(t, db, q, "w-late", -time.Second) // Within WaiterGrace: kept.

		var notified chan string
		if store.Of(db).Dialect.Caps().Notify {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			l, err := store.Of(db).Listen(ctx, store.NotifyChannel)
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			notified = make(chan string, 16)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(notified)
				for {
					p, err := l.Wait(ctx)
					if err != nil {
						return
					}
					// The channel is database-wide: other tests' names arrive too.
					select {
					case notified <- p:
					case <-ctx.Done():
						return
					}
				}
			}()
			t.Cleanup(func() { cancel(); wg.Wait(); _ = l.Close() })
		}

		r := newReaper(t, db, nil)
		st := runOnce(t, r)
		if !st.Worked || st.Skipped || st.Token <= 0 {
			t.Fatalf("pass did not work: %+v", st)
		}
		if st.ExpiredFreed != 1 || st.WaitersDeleted != 1 || st.IdleDeleted != 0 {
			t.Fatalf("counts: %+v, want 1 expired freed, 1 waiter deleted, 0 idle deleted", st)
		}
		// The gauges describe the tables as the pass found them.
		if st.LocksHeld != 1 || st.Waiters != 1 || st.DeadWaiters != 2 || st.OldestStale < 59*time.Minute {
			t.Fatalf("gauges: %+v, want 1 lock held, 1 live and 2 dead waiters, a lease stale for an hour", st)
		}

		after := holder(t, db, live)
		if after.Owner != "owner-live" || after.Version != int64(liveToken) || !after.ExpiresAt.Equal(before.ExpiresAt) {
			t.Fatalf("live lease changed: before %+v after %+v", before, after)
		}
		if h := holder(t, db, stale); !h.Exists || h.Owner != "" || !h.ExpiresAt.IsZero() {
			t.Fatalf("stale lease not freed: %+v", h)
		}
		if n := waiters(t, db, q); n != 2 {
			t.Fatalf("%d waiters left, want 2 (live and within grace)", n)
		}
		// The reaper released its own lease.
		if h := holder(t, db, LeaseName); h.Held() {
			t.Fatalf("reaper lease still held: %+v", h)
		}

		if notified != nil {
			// The stale name and the queue's name were announced.
			want := map[string]bool{stale: true, q: true}
			guard := time.After(30 * time.Second)
			for len(want) > 0 {
				select {
				case p, ok := <-notified:
					if !ok {
						t.Fatalf("listener ended; still waiting for %v", want)
					}
					delete(want, p)
				case <-guard:
					t.Fatalf("hang guard: no notification for %v", want)
				}
			}
		}

		// A second pass finds nothing to do: no stale lease, the dead waiter
		// within grace still there.
		st = runOnce(t, r)
		if st.ExpiredFreed != 0 || st.WaitersDeleted != 0 || st.IdleDeleted != 0 {
			t.Fatalf("second pass: %+v, want nothing to do", st)
		}
		if st.OldestStale != 0 || st.Waiters != 1 || st.DeadWaiters != 1 {
			t.Fatalf("second pass gauges: %+v, want no stale lease, 1 live and 1 dead waiter", st)
		}
	})
}

func TestPassBatchesUntilShort(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		const n = 23
		for i := 0; i < n; i++ {
			name := randomName("batch")
			acquire(t, db, name, "o", time.Hour)
			expire(t, db, name, -time.Minute)
			dbtest.AddWaiter(t, db, name, "w", -time.Hour)
		}
		r := newReaper(t, db, &Config{BatchSize: 5})
		st := runOnce(t, r)
		if st.ExpiredFreed != n || st.WaitersDeleted != n {
			t.Fatalf("counts: %+v, want %d freed and %d waiters deleted", st, n, n)
		}
		// 23 rows in batches of 5: 5 batches per step. SQLite starts smaller
		// (see Config.BatchSize): at least as many there.
		if st.Batches != 10 && (iso.Kind != store.SQLite || st.Batches < 10) {
			t.Fatalf("batches %d, want 10", st.Batches)
		}
	})
}

func TestIdleRowsDeletedTokensKeepGrowing(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		idle, recent, held := randomName("idle"), randomName("recent"), randomName("held")
		// Several acquisitions push idle's version above any floor a fresh row
		// would start from.
		var last dblock.Token
		for i := 0; i < 5; i++ {
			last = acquire(t, db, idle, "o", time.Hour)
			release(t, db, idle, "o", last)
		}
		age(t, db, idle, -48*time.Hour)
		tok := acquire(t, db, recent, "o", time.Hour)
		release(t, db, recent, "o", tok)
		acquire(t, db, held, "o", time.Hour)
		age(t, db, held, -48*time.Hour) // Held, however old: kept.

		r := newReaper(t, db, nil)
		st := runOnce(t, r)
		if st.IdleDeleted != 1 {
			t.Fatalf("idle deleted %d, want 1 (%+v)", st.IdleDeleted, st)
		}
		if h := holder(t, db, idle); h.Exists {
			t.Fatalf("idle row still there: %+v", h)
		}
		if h := holder(t, db, recent); !h.Exists {
			t.Fatal("recently freed row deleted")
		}
		if h := holder(t, db, held); !h.Held() || h.Owner != "o" {
			t.Fatalf("held row changed: %+v", h)
		}
		next := acquire(t, db, idle, "o2", time.Hour)
		if next <= last {
			t.Fatalf("token after deletion %d, want greater than %d", next, last)
		}
	})
}

func TestRenewalRacingPassesKeepsLease(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		const (
			holders = 4
			rounds  = 15
			ttl     = 2 * time.Second
		)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var (
			failures     atomic.Int64 // renewals of an unexpired lease that failed
			renewals     atomic.Int64
			checked      atomic.Int64 // renewals whose round trip ended inside the lease
			regressions  atomic.Int64 // tokens that did not grow
			holdersDone  sync.WaitGroup
			passErrors   atomic.Int64
			reaped       atomic.Int64
			stopReapers  = make(chan struct{})
			reapersDone  sync.WaitGroup
			firstFailure atomic.Value
		)
		// tryAcquire retries while the name is busy: a pass may hold its row for a moment.
		tryAcquire := func(name, owner string) (dblock.Token, time.Time, bool) {
			for ctx.Err() == nil {
				start := time.Now()
				res, err := store.Of(db).AcquireLease(ctx, nil, store.AcquireParams{Name: name, Owner: owner, Mode: dblock.ModeOptimistic, TTL: ttl})
				if err == nil && res.Acquired {
					return res.Token, start, true
				}
				time.Sleep(time.Millisecond)
			}
			return 0, time.Time{}, false
		}
		for h := 0; h < holders; h++ {
			holdersDone.Add(1)
			go func() {
				defer holdersDone.Done()
				name, owner := randomName("race"), randomName("owner")
				var last dblock.Token
				for round := 0; round < rounds && ctx.Err() == nil; round++ {
					token, acked, ok := tryAcquire(name, owner)
					if !ok {
						return
					}
					if token <= last {
						regressions.Add(1)
					}
					last = token
					for i := 0; i < 5; i++ {
						start := time.Now()
						ok, err := store.Of(db).RenewLease(ctx, nil, name, owner, token, ttl)
						renewals.Add(1)
						// The database's expiry is at least acked + ttl (acked is
						// the local start of the request that set it, and the
						// clocks are the host's), so a renewal whose whole round
						// trip ended before that ran on an unexpired lease and
						// must succeed. One that waited longer (SQLite's single
						// writer under -race) may legitimately find it expired.
						if time.Now().Before(acked.Add(ttl - 50*time.Millisecond)) {
							checked.Add(1)
							if err != nil || !ok {
								failures.Add(1)
								h, _ := store.Of(db).LeaseHolder(context.WithoutCancel(ctx), nil, name)
								firstFailure.CompareAndSwap(nil, errors.Join(fmt.Errorf(
									"renew of %s sent %v into its lease took %v and failed; row now %+v",
									name, start.Sub(acked), time.Since(start), h), err))
							}
						}
						if ok {
							acked = start
						}
					}
					ok, err := store.Of(db).ReleaseLease(ctx, nil, name, owner, token)
					if (err != nil || !ok) && time.Now().Before(acked.Add(ttl-50*time.Millisecond)) {
						failures.Add(1)
						firstFailure.CompareAndSwap(nil, errors.Join(errors.New("release of a held lease failed"), err))
					}
					// Make the freed row idle at once, so the passes delete it
					// while this holder comes back for it.
					_, _ = db.SQL().ExecContext(ctx, "UPDATE dblock_locks SET updated_at = "+shifted(db, 1)+
						" WHERE name = "+store.Of(db).Dialect.Placeholder(2)+" AND owner IS NULL", (-48 * time.Hour).Microseconds(), name)
					// And leave some expired garbage for the passes to free.
					g := randomName("garbage")
					if tok, _, ok := tryAcquire(g, owner); ok {
						_ = tok
						_, _ = db.SQL().ExecContext(ctx, "UPDATE dblock_locks SET expires_at = "+shifted(db, 1)+
							" WHERE name = "+store.Of(db).Dialect.Placeholder(2), (-time.Minute).Microseconds(), g)
					}
				}
			}()
		}
		for i := 0; i < 2; i++ {
			r := newReaper(t, iso.Open(t), &Config{BatchSize: 2})
			reapersDone.Add(1)
			go func() {
				defer reapersDone.Done()
				for {
					select {
					case <-stopReapers:
						return
					default:
					}
					st, err := r.RunOnce(ctx)
					if err != nil && ctx.Err() == nil {
						passErrors.Add(1)
						firstFailure.CompareAndSwap(nil, err)
					}
					reaped.Add(int64(st.ExpiredFreed + st.IdleDeleted))
				}
			}()
		}
		holdersDone.Wait()
		close(stopReapers)
		reapersDone.Wait()
		if ctx.Err() != nil {
			t.Fatalf("hang guard: %v", ctx.Err())
		}
		if failures.Load() != 0 || passErrors.Load() != 0 {
			t.Fatalf("%d renew/release failures, %d pass errors; first: %v", failures.Load(), passErrors.Load(), firstFailure.Load())
		}
		if regressions.Load() != 0 {
			t.Fatalf("%d tokens did not grow after a pass deleted the row", regressions.Load())
		}
		if renewals.Load() != holders*rounds*5 {
			t.Fatalf("%d renewals, want %d", renewals.Load(), holders*rounds*5)
		}
		if checked.Load() < renewals.Load()/2 {
			t.Fatalf("only %d of %d renewals ended inside their lease: the check was mostly vacuous", checked.Load(), renewals.Load())
		}
		if reaped.Load() == 0 {
			t.Fatal("the passes freed or deleted nothing: the race was not exercised")
		}
	})
}

func TestRowLockedByTransactionIsSkipped(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := iso.DB
		if !store.Of(db).Dialect.Caps().RowLocks {
			t.Skip("SQLite has no row locks: a transaction holds the whole database")
		}
		expired, idle := randomName("expired"), randomName("idle")
		acquire(t, db, expired, "o", time.Hour)
		expire(t, db, expired, -time.Hour)
		tok := acquire(t, db, idle, "o", time.Hour)
		release(t, db, idle, "o", tok)
		age(t, db, idle, -48*time.Hour)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tx, err := store.Of(db).BeginTxx(ctx, nil)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		defer func() { _ = tx.Rollback() }()
		var names []string
		err = tx.SelectContext(ctx, &names, "SELECT name FROM dblock_locks WHERE name IN ("+
			store.Of(db).Dialect.Placeholder(1)+", "+store.Of(db).Dialect.Placeholder(2)+") FOR UPDATE", expired, idle)
		if err != nil || len(names) != 2 {
			t.Fatalf("lock rows: %v %v", names, err)
		}

		r := newReaper(t, iso.Open(t), nil)
		st := runOnce(t, r) // Waiting on the locked rows would hit the hang guard.
		if st.ExpiredFreed != 0 || st.IdleDeleted != 0 {
			t.Fatalf("pass touched locked rows: %+v", st)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
		if h := holder(t, db, expired); h.Owner != "o" {
			t.Fatalf("locked expired row changed: %+v", h)
		}
		if h := holder(t, db, idle); !h.Exists {
			t.Fatal("locked idle row deleted")
		}
		// Unlocked, both are reaped.
		st = runOnce(t, r)
		if st.ExpiredFreed != 1 || st.IdleDeleted != 1 {
			t.Fatalf("after commit: %+v, want 1 freed and 1 deleted", st)
		}
	})
}

func TestTwoReapersNeverWorkAtOnce(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		const passes = 40
		var (
			active, overlaps, worked, skipped atomic.Int64
			mu                                sync.Mutex
			tokens                            []dblock.Token
		)
		hooks := &Hooks{
			OnPassStart: func(token dblock.Token) {
				if active.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				tokens = append(tokens, token)
				mu.Unlock()
			},
			OnPass: func(st Stats, _ error) {
				if st.Worked {
					active.Add(-1)
				}
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, 2*passes)
		for i := 0; i < 2; i++ {
			r := newReaper(t, iso.Open(t), &Config{Hooks: hooks})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := 0; p < passes; p++ {
					st, err := r.RunOnce(ctx)
					if err != nil {
						errs <- err
						return
					}
					if st.Worked {
						worked.Add(1)
					}
					if st.Skipped {
						skipped.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("pass: %v", err)
		}
		if overlaps.Load() != 0 {
			t.Fatalf("%d passes worked while another was working", overlaps.Load())
		}
		if worked.Load()+skipped.Load() != 2*passes || worked.Load() == 0 {
			t.Fatalf("worked %d + skipped %d, want %d in all and some worked", worked.Load(), skipped.Load(), 2*passes)
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("reaper lease tokens not increasing: %v", tokens)
			}
		}
	})
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, store.SQLite).DB
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"bad spec", Config{Schedule: "every now and then"}, "schedule"},
		{"six fields", Config{Schedule: "0 */5 * * * *"}, "schedule"},
		{"bad every", Config{Schedule: "@every banana"}, "schedule"},
		{"negative batch", Config{BatchSize: -1}, "batch size"},
		{"huge batch", Config{BatchSize: BatchSizeMax + 1}, "batch size"},
		{"short retention", Config{Retention: 59 * time.Second}, "retention"},
		{"negative grace", Config{WaiterGrace: -time.Second}, "waiter grace"},
		{"tiny timeout", Config{QueryTimeout: time.Millisecond}, "query timeout"},
		{"long pause", Config{BatchPause: 2 * time.Minute}, "batch pause"},
		{"bad owner", Config{Owner: "a\x00b"}, "owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := New(db, &tc.cfg)
			if !errors.Is(err, dblock.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) ||
				!strings.HasPrefix(err.Error(), "reaper: ") {
				t.Fatalf("New(%+v) = %v, want a reaper: error wrapping ErrInvalidOption about %s", tc.cfg, err, tc.want)
			}
		})
	}
	if _, err := New(nil, nil); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Fatalf("New(nil) = %v, want ErrInvalidOption", err)
	}
	for _, spec := range []string{"", "*/5 * * * *", "@hourly", "@every 1m30s", "CRON_TZ=UTC 0 3 * * *"} {
		r, err := New(db, &Config{Schedule: spec})
		if err != nil {
			t.Fatalf("schedule %q: %v", spec, err)
		}
		if spec == "" && r.Config().Schedule != ScheduleDefault {
			t.Fatalf("default schedule %q, want %q", r.Config().Schedule, ScheduleDefault)
		}
	}
	r := newReaper(t, db, nil)
	c := r.Config()
	if c.BatchSize != BatchSizeDefault || c.Retention != RetentionDefault || c.WaiterGrace != WaiterGraceDefault ||
		c.QueryTimeout != QueryTimeoutDefault || c.BatchPause != BatchPauseDefault || c.Owner == "" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestSchemaMissing(t *testing.T) {
	t.Parallel()
	for _, kind := range dbtest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.NewEmpty(t, kind)
			r := newReaper(t, iso.DB, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for what, err := range map[string]error{"Check": r.Check(ctx), "RunOnce": func() error { _, err := r.RunOnce(ctx); return err }()} {
				if !errors.Is(err, dblock.ErrSchemaMissing) || !strings.Contains(err.Error(), "dblock migrate up") {
					t.Fatalf("%s = %v, want ErrSchemaMissing with the migrate hint", what, err)
				}
			}
		})
	}
}

// levelRecorder keeps the level of every "reaper: pass done" record.
type levelRecorder struct {
	mu     sync.Mutex
	levels []slog.Level
}

func (h *levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelRecorder) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "reaper: pass done" {
		h.mu.Lock()
		h.levels = append(h.levels, r.Level)
		h.mu.Unlock()
	}
	return nil
}
func (h *levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelRecorder) WithGroup(string) slog.Handler      { return h }

// TestPassLogLevel logs a pass that freed rows at Info and one that found
// nothing to do at Debug, so a quiet sidecar does not log every 15 s.
func TestPassLogLevel(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, store.SQLite).DB
	stale := randomName("stale")
	acquire(t, db, stale, "o", time.Hour)
	expire(t, db, stale, -time.Hour)
	rec := &levelRecorder{}
	r := newReaper(t, db, &Config{Logger: slog.New(rec)})
	runOnce(t, r)
	runOnce(t, r)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.levels) != 2 || rec.levels[0] != slog.LevelInfo || rec.levels[1] != slog.LevelDebug {
		t.Fatalf("pass log levels %v, want [INFO DEBUG]", rec.levels)
	}
}
