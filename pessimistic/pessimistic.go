package pessimistic

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
)

// ErrClosed is the cause of waits ended by Close (the error also wraps
// dblock.ErrNotAcquired) and the error of acquisitions on a closed Locker.
var ErrClosed = errors.New("pessimistic: locker closed")

// Defaults of Config.
const (
	// WatchIntervalDefault is how often the server is asked whether the
	// sessions holding locks are still alive.
	WatchIntervalDefault = 500 * time.Millisecond

	// SQLiteWaitChunk is how long one BEGIN IMMEDIATE waits for the
	// database's write lock before Acquire checks ctx and tries again.
	SQLiteWaitChunk = time.Second

	backoffMin = 5 * time.Millisecond
	backoffMax = 500 * time.Millisecond

	// cleanupTimeout bounds the clean-up statements run on behalf of a
	// failed acquisition.
	cleanupTimeout = 10 * time.Second
)

// Config configures a Locker. The zero value means defaults.
type Config struct {
	// Logger receives state changes at Debug and lost locks at Warn.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks observe acquisitions, releases and losses. Optional.
	Hooks *dblock.Hooks
	// LockTimeout bounds how long Acquire waits when the call passes no
	// WithWait. Defaults to zero: wait until ctx ends.
	LockTimeout time.Duration
	// TTL is the server-side bound on a held transaction that stays idle
	// (no statement running): past it the server ends the transaction and
	// its session, so a frozen or partitioned holder cannot keep a name
	// forever (PostgreSQL idle_in_transaction_session_timeout, MariaDB
	// idle_transaction_timeout; MySQL 8 and SQLite have no such bound). A
	// per-call WithTTL overrides it. Defaults to dblock.TTLDefault (30 s).
	TTL time.Duration
	// WatchInterval is how often a Locker holding locks asks the server,
	// on another pooled connection, whether the holding sessions still
	// exist. Defaults to WatchIntervalDefault.
	WatchInterval time.Duration
	// AllowMultiPrimary lets pessimistic locks run on a node of a Galera
	// cluster. By default the first acquisition there fails with
	// dialect.ErrMultiPrimary: a row lock holds on one node only, so two
	// clients writing through different nodes would both get the lock. Set
	// it only when every client of these locks writes through the same node
	// (a proxy that sends all writes to one primary); otherwise use the
	// optimistic or fairqueue mode, whose leases are certified cluster-wide.
	AllowMultiPrimary bool
}

// Locker takes pessimistic locks: a row lock (SELECT ... FOR UPDATE) on a
// name's dblock_locks row, held by a transaction on a pinned connection.
// It is safe for concurrent use.
type Locker struct {
	db       *dialect.DB
	log      *slog.Logger
	hooks    dblock.Hooks
	lockWait time.Duration
	ttl      time.Duration
	interval time.Duration

	// closing is cancelled by Close, ending the waits under way.
	closing   context.Context
	cancelAll context.CancelCauseFunc
	inflight  sync.WaitGroup

	mu       sync.Mutex
	holds    map[holdKey]*hold
	all      map[*hold]struct{}
	gates    map[string]*gate
	closed   bool
	watching bool
	stop     chan struct{}
	wg       sync.WaitGroup

	idleMu  sync.Mutex
	idleSet map[any]time.Duration // MariaDB: driver connection -> idle_transaction_timeout set on it

	allowMultiPrimary bool
	exclusive         atomic.Bool // The database's row locks were found to exclude every client.
}

type holdKey struct{ name, owner string }

// New returns a Locker on db. It does not close db.
func New(db *dialect.DB, cfg *Config) (*Locker, error) {
	if db == nil {
		return nil, fmt.Errorf("pessimistic: new: %w: nil database", dblock.ErrInvalidOption)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	l := &Locker{
		db:       db,
		log:      dblock.LoggerOrDefault(cfg.Logger),
		lockWait: cfg.LockTimeout,
		ttl:      cfg.TTL,
		interval: cfg.WatchInterval,
		holds:    make(map[holdKey]*hold),
		all:      make(map[*hold]struct{}),
		gates:    make(map[string]*gate),
		stop:     make(chan struct{}),
		idleSet:  make(map[any]time.Duration),

		allowMultiPrimary: cfg.AllowMultiPrimary,
	}
	if cfg.Hooks != nil {
		l.hooks = *cfg.Hooks
	}
	l.closing, l.cancelAll = context.WithCancelCause(context.Background())
	if l.lockWait < 0 {
		return nil, fmt.Errorf("pessimistic: new: %w: lock timeout %v is negative", dblock.ErrInvalidOption, l.lockWait)
	}
	if l.ttl == 0 {
		l.ttl = dblock.TTLDefault
	}
	if err := dblock.ValidateTTL(l.ttl); err != nil {
		return nil, fmt.Errorf("pessimistic: new: %w", err)
	}
	if l.interval == 0 {
		l.interval = WatchIntervalDefault
	}
	if l.interval < time.Millisecond {
		return nil, fmt.Errorf("pessimistic: new: %w: watch interval %v is below 1ms", dblock.ErrInvalidOption, l.interval)
	}
	return l, nil
}

// DB returns the database the Locker runs on.
func (l *Locker) DB() *dialect.DB { return l.db }

// hold is one locking transaction: one or more names (AcquireMany), one
// owner, and every handle that re-entered it. Fields below mu are guarded by
// the Locker's mu.
type hold struct {
	l        *Locker
	names    []string
	owner    string
	conn     *sqlx.Conn
	tx       *sqlx.Tx
	session  int64 // server session id; zero on SQLite
	ttl      time.Duration
	prevBusy time.Duration // SQLite: busy timeout to restore; -1 when untouched
	start    time.Time

	// Guarded by Locker.mu.
	tokens   map[string]dblock.Token
	count    int
	rollback bool
	ended    bool
	lost     error
	lastSeen time.Time
	handles  []*Lease
	gates    []string // gate keys held until the hold ends or is lost
}

// Lease is a held pessimistic lock: the embedded *dblock.Lease (Name, Owner,
// Token, Done, Err, Release) plus the locking transaction. Release commits.
type Lease struct {
	*dblock.Lease
	h        *hold
	ctl      dblock.LeaseControl
	rollback atomic.Bool
}

// Tx returns the locking transaction. Statements run on it are part of the
// critical section and commit (or roll back) with the lock. Do not call its
// Commit or Rollback: end the lock with Commit, Rollback or Release.
func (l *Lease) Tx() *sqlx.Tx { return l.h.tx }

// Names returns the names this lock holds (several for AcquireMany).
func (l *Lease) Names() []string { return slices.Clone(l.h.names) }

// TokenOf returns the fencing token of one of the held names (zero when no
// token was asked for).
func (l *Lease) TokenOf(name string) dblock.Token {
	l.h.l.mu.Lock()
	defer l.h.l.mu.Unlock()
	return l.h.tokens[name]
}

// Commit releases the lock by committing its transaction (the same as
// Release). When other handles of the same owner still hold the name, the
// transaction ends with the last of them.
func (l *Lease) Commit(ctx context.Context) error { return l.Release(ctx) }

// Rollback releases the lock by rolling its transaction back. With
// reentrant handles, the transaction ends with the last of them, and it is
// rolled back if any of them asked for a rollback.
func (l *Lease) Rollback(ctx context.Context) error {
	l.rollback.Store(true)
	return l.Release(ctx)
}

// Acquire takes name, waiting in the database's lock queue (bounded by ctx,
// WithWait and Config.LockTimeout) for a pessimistic holder, and polling
// with backoff until expiry for a lease holder. A second Acquire by the same
// owner for a name this Locker holds re-enters the held transaction.
func (l *Locker) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, "acquire", []string{name}, false, opts)
}

// TryAcquire takes name or returns at once an error wrapping
// dblock.ErrNotAcquired (with a *dblock.HeldError). On SQLite it returns as
// soon as the database's write lock is seen busy.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, "try acquire", []string{name}, true, opts)
}

// AcquireMany takes several names at once: their rows are locked by one
// statement in name order, so two callers asking for overlapping sets never
// deadlock on each other. The lease's Name is the sorted names joined with
// commas; Token is the highest of the names' tokens (see TokenOf). None of
// the names may already be held by this owner through this Locker.
func (l *Locker) AcquireMany(ctx context.Context, names []string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, "acquire", names, false, opts)
}

// TryAcquireMany is AcquireMany without waiting.
func (l *Locker) TryAcquireMany(ctx context.Context, names []string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, "try acquire", names, true, opts)
}

// Do acquires name (waiting like Acquire), runs fn inside the locking
// transaction under a context cancelled if the lock is lost, and commits
// when fn returns nil or rolls back when it returns an error or panics (the
// panic is re-raised after the rollback). A lock lost while fn ran is
// reported (errors.Is(err, dblock.ErrLost)) together with fn's error.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context, tx *sqlx.Tx) error, opts ...dblock.Option) error {
	lease, err := l.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return run(ctx, lease, fn)
}

func run(ctx context.Context, lease *Lease, fn func(ctx context.Context, tx *sqlx.Tx) error) (err error) {
	fnCtx, cancel := lease.Context(ctx)
	defer cancel()
	relCtx := context.WithoutCancel(ctx)
	panicked := true
	defer func() {
		if panicked {
			_ = lease.Rollback(relCtx)
		}
	}()
	fnErr := fn(fnCtx, lease.Tx())
	panicked = false
	cancel()
	var relErr error
	if fnErr != nil {
		relErr = lease.Rollback(relCtx)
	} else {
		relErr = lease.Commit(relCtx)
	}
	if relErr == nil {
		return fnErr
	}
	return errors.Join(fnErr, relErr)
}

func (l *Locker) acquire(ctx context.Context, op string, names []string, try bool, opts []dblock.Option) (*Lease, error) {
	label := labelOf(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("pessimistic: %s: %w: no names", op, dblock.ErrInvalidName)
	}
	for _, n := range names {
		if err := dblock.ValidateName(n); err != nil {
			return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
		}
	}
	o, err := dblock.ResolveOptions(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	label = labelOf(sorted)
	if err := l.checkExclusive(ctx); err != nil {
		return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	ttl := l.ttl
	if len(opts) > 0 && explicitTTL(opts) {
		ttl = o.TTL
	}
	start := time.Now()

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, ErrClosed)
	}
	if h := l.reentrant(sorted, o.Owner); h != nil {
		l.mu.Unlock()
		return l.reenter(ctx, op, label, h, o, start)
	}
	l.inflight.Add(1)
	defer l.inflight.Done()
	for _, n := range sorted {
		if h, ok := l.holds[holdKey{n, o.Owner}]; ok && !h.ended && h.lost == nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("pessimistic: %s %q: %w: %q is already held by this owner in another transaction",
				op, label, dblock.ErrInvalidOption, n)
		}
	}
	l.mu.Unlock()

	// Close ends waits: closeCtx is cancelled with ErrClosed as its cause.
	// Statements that do not wait keep the caller's ctx: a context that can
	// be cancelled costs the drivers a watcher hand-off per statement.
	closeCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.closing, func() { cancel(ErrClosed) })
	defer stop()

	wait, hasWait := o.Wait, o.HasWait
	if !hasWait && l.lockWait > 0 {
		wait, hasWait = l.lockWait, true
	}
	if hasWait && wait == 0 {
		try = true
	}
	waitCtx := closeCtx
	if hasWait && !try {
		var cancelWait context.CancelFunc
		waitCtx, cancelWait = context.WithTimeout(closeCtx, wait)
		defer cancelWait()
	}

	// Goroutines of this process queue here, not in the database: one
	// connection per name (per database on SQLite) waits there at a time,
	// and a name held by this process is handed over without a round trip.
	keys := sorted
	if l.db.Dialect.Kind() == dialect.SQLite {
		keys = []string{""}
	}
	for i, k := range keys {
		if err := l.enterGate(waitCtx, k, try); err != nil {
			l.leaveGates(keys[:i])
			if closeCtx.Err() != nil {
				err = context.Cause(closeCtx)
			}
			return nil, notAcquiredErr(op, label, nil, err)
		}
	}
	h, err := l.lock(ctx, closeCtx, waitCtx, op, label, sorted, o, ttl, try)
	if err != nil {
		l.leaveGates(keys)
		return nil, err
	}
	h.gates = keys
	return l.register(h, o, label, start)
}

func notAcquiredErr(op, label string, holder *dialect.Holder, cause error) error {
	he := &dblock.HeldError{Name: label, Mode: dblock.ModePessimistic, Cause: cause}
	if holder != nil {
		he = holder.HeldError(label, cause)
	}
	return fmt.Errorf("pessimistic: %s %q: %w", op, label, he)
}

// gate queues the goroutines of this process that want one name.
type gate struct {
	ch   chan struct{}
	refs int
}

// errHeldHere is the cause when TryAcquire finds the name taken (or being
// taken) by another goroutine of this process.
var errHeldHere = errors.New("held or being acquired in this process")

func (l *Locker) enterGate(ctx context.Context, key string, try bool) error {
	l.mu.Lock()
	g := l.gates[key]
	if g == nil {
		g = &gate{ch: make(chan struct{}, 1)}
		l.gates[key] = g
	}
	g.refs++
	l.mu.Unlock()
	if try {
		select {
		case g.ch <- struct{}{}:
			return nil
		default:
			l.unrefGate(key, g)
			return errHeldHere
		}
	}
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		l.unrefGate(key, g)
		return context.Cause(ctx)
	}
}

func (l *Locker) leaveGates(keys []string) {
	for _, k := range keys {
		l.mu.Lock()
		g := l.gates[k]
		l.mu.Unlock()
		<-g.ch
		l.unrefGate(k, g)
	}
}

func (l *Locker) unrefGate(key string, g *gate) {
	l.mu.Lock()
	if g.refs--; g.refs == 0 {
		delete(l.gates, key)
	}
	l.mu.Unlock()
}

// openGates lets the next goroutine of this process in, once, when h ends or
// is lost.
func (l *Locker) openGates(h *hold) {
	l.mu.Lock()
	keys := h.gates
	h.gates = nil
	l.mu.Unlock()
	l.leaveGates(keys)
}

// explicitTTL reports whether opts set a TTL (ResolveOptions fills in the
// default otherwise, which must not override Config.TTL).
func explicitTTL(opts []dblock.Option) bool {
	var o dblock.Options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o.TTL != 0
}

// checkExclusive makes sure, once, that a row lock on the database excludes
// every client (see Config.AllowMultiPrimary).
func (l *Locker) checkExclusive(ctx context.Context) error {
	if l.allowMultiPrimary || l.exclusive.Load() {
		return nil
	}
	ok, err := l.db.RowLocksExclusive(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("check for a multi-primary cluster: %w", err)
	case !ok:
		return fmt.Errorf("%w: use the optimistic or fairqueue mode, or set pessimistic.Config.AllowMultiPrimary if every client writes through one node",
			dialect.ErrMultiPrimary)
	}
	l.exclusive.Store(true)
	return nil
}

func labelOf(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ","
		}
		s += n
	}
	return s
}

// reentrant returns the live hold of owner that covers exactly names, if any.
func (l *Locker) reentrant(names []string, owner string) *hold {
	h, ok := l.holds[holdKey{names[0], owner}]
	if !ok || h.ended || h.lost != nil {
		return nil
	}
	if len(names) == 1 {
		return h
	}
	if slices.Equal(h.names, names) {
		return h
	}
	return nil
}

func (l *Locker) reenter(ctx context.Context, op, label string, h *hold, o dblock.Options, start time.Time) (*Lease, error) {
	l.mu.Lock()
	needToken := o.Token && h.tokens == nil
	l.mu.Unlock()
	var tokens map[string]dblock.Token
	if needToken {
		var err error
		if tokens, err = l.bumpTokens(ctx, h.tx, h.names); err != nil {
			return nil, fmt.Errorf("pessimistic: %s %q: token: %w", op, label, err)
		}
	}
	l.mu.Lock()
	if h.ended || h.lost != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("pessimistic: %s %q: %w: the held transaction ended while re-entering", op, label, dblock.ErrNotAcquired)
	}
	if tokens != nil && h.tokens == nil {
		h.tokens = tokens
	}
	h.count++
	lease := l.newHandle(h, label)
	l.mu.Unlock()
	l.acquired(lease, start)
	return lease, nil
}

// register records a fresh hold and returns its first handle.
func (l *Locker) register(h *hold, o dblock.Options, label string, start time.Time) (*Lease, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = h.end(context.Background(), true)
		l.openGates(h)
		return nil, fmt.Errorf("pessimistic: acquire %q: %w: %w", label, dblock.ErrNotAcquired, ErrClosed)
	}
	h.count = 1
	h.lastSeen = time.Now()
	for _, n := range h.names {
		l.holds[holdKey{n, h.owner}] = h
	}
	l.all[h] = struct{}{}
	lease := l.newHandle(h, label)
	if h.session != 0 && !l.watching {
		l.watching = true
		l.wg.Add(1)
		go l.watch()
	}
	l.mu.Unlock()
	l.acquired(lease, start)
	return lease, nil
}

// newHandle makes a handle on h; l.mu is held.
func (l *Locker) newHandle(h *hold, label string) *Lease {
	var max dblock.Token
	for _, t := range h.tokens {
		if t > max {
			max = t
		}
	}
	lease := &Lease{h: h}
	dl, ctl := dblock.NewLease(dblock.LeaseParams{
		Name: label, Owner: h.owner, Mode: dblock.ModePessimistic, Token: max, Reentry: h.count,
		Release: func(ctx context.Context) error { return l.releaseHandle(ctx, lease) },
	})
	lease.Lease, lease.ctl = dl, ctl
	h.handles = append(h.handles, lease)
	return lease
}

func (l *Locker) acquired(lease *Lease, start time.Time) {
	waited := time.Since(start)
	l.log.Debug("pessimistic: acquired", "lock_key", lease.Name(), "owner", lease.Owner(), "token", int64(lease.Token()))
	if l.hooks.OnAcquired != nil {
		l.hooks.OnAcquired(lease.Name(), lease.Owner(), lease.Token(), waited)
	}
}

// releaseHandle ends one handle; the last handle of a hold ends its
// transaction (commit, or rollback if any handle asked for one or the hold
// was lost).
func (l *Locker) releaseHandle(ctx context.Context, lease *Lease) error {
	h := lease.h
	l.mu.Lock()
	if lease.rollback.Load() {
		h.rollback = true
	}
	h.count--
	if h.count > 0 {
		l.mu.Unlock()
		l.released(lease, h)
		return nil
	}
	h.ended = true
	l.forget(h)
	rollback := h.rollback || h.lost != nil
	lost := h.lost
	l.mu.Unlock()

	err := h.end(ctx, rollback)
	if err != nil && lost == nil && isConnErr(err) {
		l.lose(h, dblock.ErrConnLost)
	}
	l.openGates(h)
	l.released(lease, h)
	return err
}

// forget removes h from the Locker's maps; l.mu is held.
func (l *Locker) forget(h *hold) {
	for _, n := range h.names {
		if cur := l.holds[holdKey{n, h.owner}]; cur == h {
			delete(l.holds, holdKey{n, h.owner})
		}
	}
	delete(l.all, h)
}

func (l *Locker) released(lease *Lease, h *hold) {
	l.log.Debug("pessimistic: released", "lock_key", lease.Name(), "owner", lease.Owner(), "token", int64(lease.Token()))
	if l.hooks.OnReleased != nil {
		l.hooks.OnReleased(lease.Name(), lease.Owner(), lease.Token(), time.Since(h.start))
	}
}

// lose marks every handle of h lost with reason.
func (l *Locker) lose(h *hold, reason error) {
	l.mu.Lock()
	if h.lost != nil {
		l.mu.Unlock()
		return
	}
	h.lost = reason
	handles := slices.Clone(h.handles)
	l.mu.Unlock()
	l.openGates(h)
	for _, lease := range handles {
		if lease.ctl.Lose(reason) {
			l.log.Warn("pessimistic: lock lost", "lock_key", lease.Name(), "owner", lease.Owner(),
				"token", int64(lease.Token()), "error", reason)
			if l.hooks.OnLost != nil {
				l.hooks.OnLost(lease.Name(), lease.Owner(), lease.Token(), lease.Err())
			}
		}
	}
}

// end finishes the transaction and gives the connection back to the pool,
// or destroys it when the transaction could not be ended cleanly.
func (h *hold) end(ctx context.Context, rollback bool) error {
	var err error
	if rollback {
		err = h.tx.Rollback()
	} else {
		err = h.tx.Commit()
	}
	err = h.l.db.Classify(err)
	destroy := err != nil
	if !destroy && h.prevBusy >= 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, berr := h.l.db.SQLiteBusyTimeout(rctx, h.conn, h.prevBusy)
		cancel()
		destroy = berr != nil
	}
	closeConn(h.conn, destroy)
	if err != nil {
		verb := "commit"
		if rollback {
			verb = "rollback"
		}
		return fmt.Errorf("%s: %w", verb, err)
	}
	return nil
}

// closeConn returns conn to the pool, or destroys it (database/sql discards a
// connection whose Raw callback reports driver.ErrBadConn) so that a session
// that may still hold a lock never goes back to the pool.
func closeConn(conn *sqlx.Conn, destroy bool) {
	if destroy {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
}

func isConnErr(err error) bool {
	return errors.Is(err, dblock.ErrUnavailable) || errors.Is(err, dblock.ErrConnLost) ||
		errors.Is(err, driver.ErrBadConn)
}

// Close rolls back the locks still held through this Locker (their handles
// report ErrReleased) and stops the session watcher. It does not close the
// database.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.stop)
	l.mu.Unlock()
	l.cancelAll(ErrClosed)
	l.inflight.Wait()
	l.mu.Lock()
	var leases []*Lease
	for h := range l.all {
		h.rollback = true
		for _, lease := range h.handles {
			if !lease.ctl.Releasing() {
				leases = append(leases, lease)
			}
		}
	}
	l.mu.Unlock()
	var errs []error
	for _, lease := range leases {
		lease.rollback.Store(true)
		err := lease.Release(context.Background())
		if err != nil && !errors.Is(err, dblock.ErrReleased) && !errors.Is(err, dblock.ErrLost) {
			errs = append(errs, err)
		}
	}
	l.wg.Wait()
	return errors.Join(errs...)
}

// ---- acquiring ----

// errRetry asks the acquire loop to try again at once (a row was missing).
var errRetry = errors.New("retry")

// errTokenStale asks the acquire loop to try again at once: on SQLite a
// token issued before the lock was overtaken by another acquisition.
var errTokenStale = errors.New("token overtaken")

// lock runs acquisition attempts until one succeeds, the wait ends, or an
// error that waiting cannot fix occurs.
func (l *Locker) lock(callCtx, ctx, waitCtx context.Context, op, label string, names []string, o dblock.Options, ttl time.Duration, try bool) (*hold, error) {
	notAcquired := func(holder *dialect.Holder, cause error) error {
		return notAcquiredErr(op, label, holder, cause)
	}
	backoff := backoffMin
	missing, stale := 0, 0
	for attempt := 1; ; attempt++ {
		if err := waitCtx.Err(); err != nil {
			return nil, notAcquired(nil, context.Cause(waitCtx))
		}
		h, holder, err := l.attempt(callCtx, ctx, waitCtx, names, o, ttl, try)
		switch {
		case err == nil && holder == nil:
			return h, nil
		case errors.Is(err, errTokenStale):
			if stale++; stale > 1000 {
				return nil, fmt.Errorf("pessimistic: %s %q: fencing token overtaken %d times", op, label, stale)
			}
			continue
		case errors.Is(err, errRetry):
			if missing++; missing > 5 {
				return nil, fmt.Errorf("pessimistic: %s %q: lock row keeps disappearing", op, label)
			}
			continue
		case errors.Is(err, dblock.ErrNotAcquired):
			if !try {
				settle(waitCtx)
			}
			if waitCtx.Err() != nil {
				return nil, notAcquired(nil, errors.Join(err, context.Cause(waitCtx)))
			}
			if try {
				return nil, notAcquired(nil, err)
			}
			if l.db.Dialect.Kind() != dialect.SQLite && !l.db.MariaDB() {
				// The database's own wait ended at the bound.
				return nil, notAcquired(nil, err)
			}
			l.log.Debug("pessimistic: still waiting", "lock_key", label, "owner", o.Owner, "attempt", attempt)
			continue
		case err != nil:
			if waitCtx.Err() != nil && ctx.Err() == nil {
				// The client stopped the wait at its bound (MySQL bounds
				// server-side in whole seconds only).
				return nil, notAcquired(nil, context.Cause(waitCtx))
			}
			// ctx merges the caller's context with Close's and may learn of
			// a cancellation a moment after callCtx; either ends the wait.
			for _, c := range []context.Context{ctx, callCtx} {
				if c.Err() != nil {
					return nil, fmt.Errorf("pessimistic: %s %q: %w: %w", op, label, dblock.ErrNotAcquired, errors.Join(context.Cause(c), err))
				}
			}
			return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
		}
		// A lease holder: fail at once, or wait for it to release or expire.
		if try {
			return nil, notAcquired(holder, nil)
		}
		sleep := backoff + rand.N(backoff/2+1)
		if left := holder.ExpiresAt.Sub(holder.Now) + time.Millisecond; left > 0 && left < sleep {
			sleep = left
		}
		backoff = min(2*backoff, backoffMax)
		l.log.Debug("pessimistic: waiting for lease holder", "lock_key", label, "owner", o.Owner, "attempt", attempt)
		t := time.NewTimer(sleep)
		select {
		case <-t.C:
		case <-waitCtx.Done():
			t.Stop()
			return nil, notAcquired(holder, context.Cause(waitCtx))
		}
	}
}

// settle waits for ctx's deadline when it is imminent: the server's lock
// timeout was set to end with it, and may end a hair earlier, so that the
// error then reports the deadline as its cause.
func settle(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	left := time.Until(dl)
	if left > 100*time.Millisecond {
		return
	}
	t := time.NewTimer(left + time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// attempt makes one try: it returns the hold, or the lease holder that
// stands in the way, or an error (errRetry when a row had to be created).
//
// ctx is the caller's context with Close's cancellation, waitCtx adds the
// wait bound; statements that do not wait run on callCtx.
func (l *Locker) attempt(callCtx, ctx, waitCtx context.Context, names []string, o dblock.Options, ttl time.Duration, try bool) (*hold, *dialect.Holder, error) {
	db := l.db
	kind := db.Dialect.Kind()
	conn, err := db.Connx(waitCtx)
	if err != nil {
		return nil, nil, db.Classify(err)
	}
	h := &hold{l: l, names: names, owner: o.Owner, conn: conn, ttl: ttl, prevBusy: -1, start: time.Now()}
	giveUp := func(err error) (*hold, *dialect.Holder, error) {
		closeConn(conn, true)
		return nil, nil, db.Classify(err)
	}
	if kind == dialect.SQLite {
		// An unbounded wait keeps the pool's busy timeout and retries;
		// a try or a bounded wait sets it for this transaction.
		dl, bounded := waitCtx.Deadline()
		if try || bounded {
			busy := time.Duration(0)
			if !try {
				busy = max(min(SQLiteWaitChunk, time.Until(dl)), time.Millisecond)
			}
			if h.prevBusy, err = db.SQLiteBusyTimeout(callCtx, conn, busy); err != nil {
				return giveUp(err)
			}
		}
	}
	if db.MariaDB() {
		if err := l.setIdle(callCtx, conn, ttl); err != nil {
			return giveUp(err)
		}
	}
	// On SQLite the lock is the database's write transaction, so nothing can
	// make a token durable while it is held: issue the tokens first, each
	// committed on its own, and check under the lock that no one got past them.
	var preIssued map[string]dblock.Token
	if kind == dialect.SQLite && o.Token {
		preIssued = make(map[string]dblock.Token, len(names))
		for _, n := range names {
			t, err := db.IssueToken(callCtx, nil, n)
			if err != nil {
				return giveUp(err)
			}
			preIssued[n] = t
		}
	}
	begin := func() error {
		// The transaction outlives the call, and a context that cannot
		// be cancelled spares database/sql a goroutine per transaction.
		tx, err := conn.BeginTxx(context.WithoutCancel(callCtx), nil)
		if err != nil {
			return db.Classify(err)
		}
		h.tx = tx
		return nil
	}
	// fail rolls back and releases the connection, destroying it unless
	// everything ended cleanly.
	fail := func(cause error) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		rerr := h.tx.Rollback()
		destroy := rerr != nil
		if !destroy && h.prevBusy >= 0 {
			_, berr := db.SQLiteBusyTimeout(rctx, conn, h.prevBusy)
			destroy = berr != nil
		}
		closeConn(conn, destroy)
		return cause
	}
	if err := begin(); err != nil {
		destroy := !errors.Is(err, dblock.ErrNotAcquired)
		if !destroy && h.prevBusy >= 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			_, berr := db.SQLiteBusyTimeout(rctx, conn, h.prevBusy)
			cancel()
			destroy = berr != nil
		}
		closeConn(conn, destroy)
		return nil, nil, err
	}
	if kind == dialect.SQLite {
		// A write takes the database's write lock, so the lock holds
		// whatever mode the pool begins transactions in.
		if err := db.SQLiteWriteLock(callCtx, h.tx); err != nil {
			return nil, nil, fail(err)
		}
	}

	found, session, err := l.lockRows(callCtx, ctx, waitCtx, h, names, ttl, try, begin)
	if err != nil {
		return nil, nil, fail(err)
	}
	if len(found) < len(names) {
		_ = fail(nil)
		for _, n := range names {
			if _, ok := found[n]; ok {
				continue
			}
			if err := db.EnsureRow(callCtx, nil, n); err != nil {
				return nil, nil, err
			}
		}
		return nil, nil, errRetry
	}
	for _, n := range names {
		if holder := found[n]; holder.Held() {
			_ = fail(nil)
			return nil, &holder, nil
		}
	}
	h.session = session
	if preIssued != nil {
		for _, n := range names {
			ok, err := db.SetToken(callCtx, h.tx, n, preIssued[n])
			if err != nil {
				return nil, nil, fail(err)
			}
			if !ok {
				_ = fail(nil)
				return nil, nil, errTokenStale
			}
		}
		h.tokens = preIssued
	} else if o.Token {
		tokens, err := l.bumpTokens(callCtx, h.tx, names)
		if err != nil {
			return nil, nil, fail(err)
		}
		h.tokens = tokens
	}
	return h, nil, nil
}

// lockRows locks the rows of names in h's transaction: NOWAIT first (the
// common, uncontended path is one statement), then, unless trying, a wait in
// the database's queue. On PostgreSQL a failed NOWAIT aborts the
// transaction, so the wait starts a new one (begin).
func (l *Locker) lockRows(callCtx, ctx, waitCtx context.Context, h *hold, names []string, ttl time.Duration, try bool, begin func() error) (map[string]dialect.Holder, int64, error) {
	db := l.db
	kind := db.Dialect.Kind()
	lockOnce := func(qctx context.Context, p dialect.RowLockParams) (map[string]dialect.Holder, int64, error) {
		p.IdleTimeout = ttl
		if len(names) == 1 {
			rl, err := db.LockRow(qctx, h.tx, names[0], p)
			if err != nil || !rl.Found {
				return nil, 0, err
			}
			return map[string]dialect.Holder{names[0]: rl.Holder}, rl.Session, nil
		}
		rows, session, err := db.LockRows(qctx, h.tx, names, p)
		if err != nil {
			return nil, 0, err
		}
		found := make(map[string]dialect.Holder, len(rows))
		for _, r := range rows {
			found[r.Name] = r.Holder
		}
		return found, session, nil
	}
	if kind == dialect.SQLite {
		return lockOnce(callCtx, dialect.RowLockParams{})
	}
	found, session, err := lockOnce(callCtx, dialect.RowLockParams{NoWait: true})
	if try || !errors.Is(err, dblock.ErrNotAcquired) {
		return found, session, err
	}
	if kind == dialect.Postgres {
		if rerr := h.tx.Rollback(); rerr != nil {
			return nil, 0, rerr
		}
		if err := begin(); err != nil {
			return nil, 0, err
		}
	}
	// Bound the wait server-side. PostgreSQL's lock_timeout is exact and
	// the query keeps the caller's ctx; MariaDB and MySQL bound in whole
	// seconds, so the client also stops at the exact wait bound.
	qctx := ctx
	if kind == dialect.MySQL {
		qctx = waitCtx
	}
	var wait time.Duration
	if dl, ok := waitCtx.Deadline(); ok {
		wait = max(time.Until(dl), time.Millisecond)
	}
	if kind != dialect.MySQL {
		return lockOnce(qctx, dialect.RowLockParams{Wait: wait})
	}
	// On MySQL the driver gives up a wait by closing the connection, which
	// the server does not notice while the statement waits: cancel the
	// server's wait too, so it is never granted the lock afterwards.
	id, err := db.SessionID(callCtx, h.tx)
	if err != nil {
		return nil, 0, err
	}
	cancelled := make(chan struct{})
	stop := context.AfterFunc(qctx, func() {
		defer close(cancelled)
		kctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := db.CancelStatement(kctx, id); err != nil {
			l.log.Warn("pessimistic: cancel an abandoned lock wait", "lock_key", labelOf(names), "error", err)
		}
	})
	found, session, err = lockOnce(qctx, dialect.RowLockParams{Wait: wait})
	if !stop() {
		<-cancelled
		if err == nil {
			// Granted as the wait ended: give it up, since the session was
			// just told to cancel and the caller's wait is over.
			err = fmt.Errorf("%w: %w", dblock.ErrNotAcquired, context.Cause(qctx))
		}
	}
	return found, session, err
}

func (l *Locker) bumpTokens(ctx context.Context, tx *sqlx.Tx, names []string) (map[string]dblock.Token, error) {
	tokens := make(map[string]dblock.Token, len(names))
	for _, n := range names {
		t, err := l.db.BumpToken(ctx, tx, n)
		if err != nil {
			return nil, err
		}
		tokens[n] = t
	}
	return tokens, nil
}

// setIdle sets MariaDB's idle_transaction_timeout on conn unless this Locker
// already set that value on the same driver connection (no round trip on the
// common path). The setting stays on the pooled connection; see the package
// documentation.
func (l *Locker) setIdle(ctx context.Context, conn *sqlx.Conn, ttl time.Duration) error {
	var key any
	_ = conn.Raw(func(dc any) error { key = dc; return nil })
	l.idleMu.Lock()
	cur, ok := l.idleSet[key]
	l.idleMu.Unlock()
	if ok && cur == ttl {
		return nil
	}
	if err := l.db.SetIdleTimeout(ctx, conn, ttl); err != nil {
		return err
	}
	l.idleMu.Lock()
	if len(l.idleSet) > 4096 {
		clear(l.idleSet)
	}
	l.idleSet[key] = ttl
	l.idleMu.Unlock()
	return nil
}

// ---- the session watcher ----

// watch asks the server, every interval and on a pooled connection other
// than the holders', which holding sessions still exist; a hold whose
// session is gone (killed, ended by the idle bound, server restarted) is
// lost with dblock.ErrConnLost. It runs only while sessions are held.
//
// Why this and not a ping on the holding connection: the user runs
// statements on the lock's transaction concurrently, and a ping between two
// reads of a result set would break the protocol. Asking from another
// connection never touches the holding one. When the server cannot be asked
// (it is down or unreachable), a hold is declared lost once its session has
// gone unconfirmed for half its TTL: by then the server may already have
// ended it. A session id reused by a new session within one interval would
// hide a loss from the watcher; the holder's next statement still fails.
func (l *Locker) watch() {
	defer l.wg.Done()
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		var (
			holds []*hold
			ids   []int64
		)
		for h := range l.all {
			if h.session != 0 && !h.ended && h.lost == nil {
				holds = append(holds, h)
				ids = append(ids, h.session)
			}
		}
		if len(holds) == 0 {
			l.watching = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		timeout := max(4*l.interval, 2*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		alive, err := l.db.AliveSessions(ctx, ids)
		cancel()
		now := time.Now()
		for _, h := range holds {
			switch {
			case err == nil && alive[h.session]:
				l.mu.Lock()
				h.lastSeen = now
				l.mu.Unlock()
			case err == nil:
				l.lose(h, dblock.ErrConnLost)
			default:
				l.mu.Lock()
				stale := !h.ended && now.Sub(h.lastSeen) > h.ttl/2
				l.mu.Unlock()
				if stale {
					l.lose(h, fmt.Errorf("%w: session unconfirmed: %w", dblock.ErrConnLost, err))
				}
			}
		}
	}
}

// ---- the dblock.Locker adapter ----

// AsLocker returns l as a dblock.Locker: Acquire and TryAcquire return the
// embedded *dblock.Lease (whose Release commits), and Do runs fn inside the
// locking transaction, committing when fn returns nil. Close closes l.
func (l *Locker) AsLocker() dblock.Locker { return adapter{l} }

type adapter struct{ l *Locker }

func (a adapter) Acquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	lease, err := a.l.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return lease.Lease, nil
}

func (a adapter) TryAcquire(ctx context.Context, name string, opts ...dblock.Option) (*dblock.Lease, error) {
	lease, err := a.l.TryAcquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return lease.Lease, nil
}

func (a adapter) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...dblock.Option) error {
	return a.l.Do(ctx, name, func(ctx context.Context, _ *sqlx.Tx) error { return fn(ctx) }, opts...)
}

func (a adapter) Close() error { return a.l.Close() }

// ---- users' own rows ----

// LockRowsParams name the rows of a user's table to lock.
type LockRowsParams struct {
	// Table and KeyColumn are identifiers (letters, digits, underscores;
	// Table may be schema-qualified), validated and quoted, never taken
	// from untrusted input.
	Table, KeyColumn string
	// Keys are the key values to lock (bind parameters).
	Keys []any
	// NoWait fails at once (dblock.ErrNotAcquired) if any row is locked.
	NoWait bool
	// SkipLocked locks the free rows and skips the locked ones
	// (work-queue style). Exclusive with NoWait.
	SkipLocked bool
}

// LockRows locks the rows of p.Table whose p.KeyColumn is in p.Keys inside
// the caller's transaction tx, in key order (so two callers locking
// overlapping sets never deadlock on each other), and returns the keys
// locked, in that order. Keys without a row are not returned; with
// SkipLocked neither are locked ones. The locks last until tx ends. A
// deadlock with another transaction wraps dblock.ErrDeadlock. On SQLite,
// which has no row locks, the caller's write transaction (BEGIN IMMEDIATE)
// is the lock and LockRows only reads.
func (l *Locker) LockRows(ctx context.Context, tx *sqlx.Tx, p LockRowsParams) ([]any, error) {
	if tx == nil {
		return nil, fmt.Errorf("pessimistic: lock rows of %q: %w: nil transaction", p.Table, dblock.ErrInvalidOption)
	}
	keys, err := l.db.LockUserRows(ctx, tx, dialect.UserRowsParams{
		Table: p.Table, KeyColumn: p.KeyColumn, Keys: p.Keys, NoWait: p.NoWait, SkipLocked: p.SkipLocked,
	})
	if err != nil {
		if errors.Is(err, dblock.ErrDeadlock) && l.db.Dialect.Kind() == dialect.MySQL {
			// MySQL rolls the victim's whole transaction back: if it was
			// a lock's transaction, that lock is gone.
			if h := l.holdOf(tx); h != nil {
				l.lose(h, err)
			}
		}
		return nil, fmt.Errorf("pessimistic: lock rows of %q: %w", p.Table, err)
	}
	return keys, nil
}

// holdOf returns the live hold whose transaction is tx, if any.
func (l *Locker) holdOf(tx *sqlx.Tx) *hold {
	l.mu.Lock()
	defer l.mu.Unlock()
	for h := range l.all {
		if h.tx == tx && !h.ended {
			return h
		}
	}
	return nil
}
