package soak

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/fairqueue"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
)

// names are the few names every worker fights over.
var names = []string{"soak:a", "soak:b", "soak:c", "soak:d"}

// lockers are one process's Lockers, shared by its workers.
type lockers struct {
	db   *dialect.DB
	opt  *optimistic.Locker
	pess *pessimistic.Locker
	fair *fairqueue.Locker
}

// maxConns bounds each process's pool: three processes per dialect run
// beside the rest of the suite, within the servers' connection limits.
const maxConns = 10

func newLockers(db *dialect.DB) (*lockers, error) {
	db.SQL().SetMaxOpenConns(maxConns)
	opt, err := optimistic.New(db, nil)
	if err != nil {
		return nil, err
	}
	pess, err := pessimistic.New(db, nil)
	if err != nil {
		_ = opt.Close()
		return nil, err
	}
	fair, err := fairqueue.New(db, nil)
	if err != nil {
		_ = opt.Close()
		_ = pess.Close()
		return nil, err
	}
	return &lockers{db: db, opt: opt, pess: pess, fair: fair}, nil
}

func (l *lockers) Close() error {
	return errors.Join(l.opt.Close(), l.pess.Close(), l.fair.Close())
}

// problems collects the errors that are not documented outcomes.
type problems struct {
	mu   sync.Mutex
	list []string
}

func (p *problems) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) < 20 {
		p.list = append(p.list, fmt.Sprintf(format, args...))
	}
}

func (p *problems) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.list...)
}

// documented reports whether err is a documented outcome of a call made
// under ctx: nil, a sentinel a contended lock may return, or ctx's own end.
func documented(ctx context.Context, err error) bool {
	if err == nil {
		return true
	}
	for _, s := range []error{dblock.ErrNotAcquired, dblock.ErrLost, dblock.ErrNotHeld, dblock.ErrConnLost,
		dblock.ErrDeadlock, dblock.ErrSerialization, dblock.ErrUnavailable} {
		if errors.Is(err, s) {
			return true
		}
	}
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// worker runs random operations on the names until its context ends.
type worker struct {
	who  string
	l    *lockers
	kind store.Kind
	rng  *rand.Rand
	bad  *problems
}

// run does steps until ctx ends.
func (w *worker) run(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		w.step(ctx, fmt.Sprintf("%s#%d", w.who, n))
	}
}

// step runs one random operation, bounded by its own wait.
func (w *worker) step(parent context.Context, op string) {
	ctx, cancel := context.WithTimeout(parent, time.Duration(50+w.rng.IntN(400))*time.Millisecond)
	defer cancel()
	name := names[w.rng.IntN(len(names))]
	var err error
	var what string
	switch k := w.rng.IntN(10); {
	case k < 3:
		what, err = "optimistic", w.lease(ctx, w.l.opt, name)
	case k < 4:
		what, err = "optimistic many", w.many(ctx)
	case k < 6:
		what, err = "fair", w.lease(ctx, w.l.fair, name)
	case k < 8:
		what, err = "pessimistic", w.pessimistic(ctx, name, w.rng.IntN(2) == 0)
	default:
		what, err = "pessimistic Do", w.pessimisticDo(ctx, name)
	}
	if !documented(ctx, err) {
		w.bad.add("%s %s %s: %v", op, what, name, err)
	}
}

// leaseOptions are a lease's options: long, or short and never renewed, so
// that some leases run out in their critical section and are taken over.
func (w *worker) leaseOptions() []dblock.Option {
	opts := []dblock.Option{dblock.WithWait(time.Duration(w.rng.IntN(300)) * time.Millisecond)}
	if w.rng.IntN(3) == 0 {
		ttl := time.Duration(20+w.rng.IntN(60)) * time.Millisecond
		opts = append(opts, dblock.WithTTL(ttl), dblock.WithMaxHold(ttl))
	}
	return opts
}

// lease takes name through l, works, and records the section under Guard.
func (w *worker) lease(ctx context.Context, l dblock.Locker, name string) error {
	lease, err := l.Acquire(ctx, name, w.leaseOptions()...)
	if err != nil {
		return err
	}
	return w.guarded(ctx, []*dblock.Lease{lease})
}

// many takes two names at once (optimistic AcquireMany).
func (w *worker) many(ctx context.Context) error {
	i := w.rng.IntN(len(names))
	set := []string{names[i], names[(i+1)%len(names)]}
	leases, err := w.l.opt.AcquireMany(ctx, set, w.leaseOptions()...)
	if err != nil {
		return err
	}
	return w.guarded(ctx, leases)
}

// guarded reads the start, works a little, then records every lease's
// section in a transaction of its own that Guard keeps valid, and releases.
func (w *worker) guarded(ctx context.Context, leases []*dblock.Lease) error {
	rel := context.WithoutCancel(ctx)
	defer func() {
		for _, l := range leases {
			if err := l.Release(rel); !documented(ctx, err) {
				w.bad.add("%s release %s: %v", w.who, l.Name(), err)
			}
		}
	}()
	// The section's statements run on a context of their own: the call's
	// short one bounds the wait only (a statement cancelled mid-way costs
	// its connection, and a lock's transaction with it).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sectionTimeout)
	defer cancel()
	begin, err := w.clock(ctx, store.Of(w.l.db))
	if err != nil {
		return err
	}
	w.work()
	tx, err := w.l.db.SQL().BeginTx(ctx, nil)
	if err != nil {
		return store.Of(w.l.db).Classify(err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, l := range leases {
		if err := w.l.opt.Guard(ctx, tx, l); err != nil {
			return err
		}
	}
	for _, l := range leases {
		if err := w.record(ctx, tx, l.Name(), int64(l.Token()), begin, l.Mode()); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
			// database/sql rolled the transaction back when ctx ended.
			return fmt.Errorf("commit: %w: %w", ctx.Err(), err)
		}
		return store.Of(w.l.db).Classify(err)
	}
	return nil
}

// pessimistic takes name in a transaction (with a token or not), records the
// section in that transaction and commits it.
func (w *worker) pessimistic(ctx context.Context, name string, token bool) error {
	opts := []dblock.Option{dblock.WithWait(time.Duration(w.rng.IntN(300)) * time.Millisecond)}
	if token {
		opts = append(opts, dblock.WithToken())
	}
	lease, err := w.l.pess.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sectionTimeout)
	defer cancel()
	defer func() { _ = lease.Rollback(ctx) }()
	begin, err := w.clock(ctx, lease.Tx())
	if err != nil {
		return err
	}
	w.work()
	if err := w.record(ctx, lease.Tx(), name, int64(lease.TokenOf(name)), begin, "pessimistic"); err != nil {
		return err
	}
	return lease.Commit(context.WithoutCancel(ctx))
}

// pessimisticDo is pessimistic through the callback form.
func (w *worker) pessimisticDo(ctx context.Context, name string) error {
	wait := dblock.WithWait(time.Duration(w.rng.IntN(300)) * time.Millisecond)
	return w.l.pess.Do(ctx, name, func(fctx context.Context, tx *sql.Tx) error {
		// fn's context ends when the call's does: its statements get one
		// of their own, cancelled only if the lock is lost.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(fctx), sectionTimeout)
		defer cancel()
		stop := context.AfterFunc(fctx, func() {
			if errors.Is(context.Cause(fctx), dblock.ErrLost) {
				cancel()
			}
		})
		defer stop()
		begin, err := w.clock(ctx, tx)
		if err != nil {
			return err
		}
		w.work()
		return w.record(ctx, tx, name, 0, begin, "pessimistic Do")
	}, wait)
}

// sectionTimeout bounds a critical section's statements.
const sectionTimeout = 10 * time.Second

// work is the critical section's own time: none, or a few milliseconds.
func (w *worker) work() {
	if d := w.rng.IntN(15); d > 5 {
		time.Sleep(time.Duration(d) * time.Millisecond)
	}
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// clock reads the database clock, in microseconds.
func (w *worker) clock(ctx context.Context, q querier) (int64, error) {
	var us int64
	err := q.QueryRowContext(ctx, "SELECT "+clockSQL(w.kind)).Scan(&us)
	return us, store.Of(w.l.db).Classify(err)
}

// record writes one section, ending now by the database clock.
func (w *worker) record(ctx context.Context, q querier, name string, token, begin int64, mode string) error {
	query := "INSERT INTO soak_sections (name, token, begin_us, end_us, who) VALUES (?, ?, ?, " + clockSQL(w.kind) + ", ?)"
	_, err := q.ExecContext(ctx, placeholders(w.kind, query), name, token, begin, w.who+" "+mode)
	return store.Of(w.l.db).Classify(err)
}

// clockSQL is the database clock in microseconds, read when the statement
// runs (PostgreSQL's now() is the transaction's start).
func clockSQL(kind store.Kind) string {
	switch kind {
	case store.Postgres:
		return "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
	case store.MySQL:
		return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
	}
	return "CAST(unixepoch('subsec') * 1000000 AS INTEGER)"
}

// placeholders turns ? into $1, $2, ... on PostgreSQL.
func placeholders(kind store.Kind, q string) string {
	if kind != store.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
