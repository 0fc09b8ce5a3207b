package pessimistic

import (
	"context"
	"database/sql"
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
	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/mode"
)

// Errors of this package. Each is wrapped with context; match with errors.Is.
var (
	// ErrPoolExhausted is the cause (with dblock.ErrNotAcquired) of a
	// TryAcquire or TryLock that found every connection of the pool in use:
	// TryAcquire does not wait for a connection to come back.
	ErrPoolExhausted = errors.New("pessimistic: no free connection in the pool")

	// ErrRolledBack: a Commit (or Release) ended in a rollback instead: the
	// first handle of a re-entered lock asked for a rollback, a re-entrant
	// handle acquired earlier rolled back to its savepoint (undoing this
	// handle's work), or PostgreSQL rolled back a failed transaction.
	ErrRolledBack = errors.New("pessimistic: transaction rolled back, not committed")

	// ErrTxEnded is the reason of a lock lost because the server ended its
	// transaction while the client still held it open: on MySQL and MariaDB
	// a deadlock victim's transaction is rolled back whole, and a statement
	// such as DDL commits it implicitly. Statements run on Tx after that ran
	// outside the transaction.
	ErrTxEnded = errors.New("pessimistic: the server ended the locking transaction")
)

// Defaults of Config.
const (
	// WatchIntervalDefault is how often the server is asked whether the
	// sessions holding locks are still alive.
	WatchIntervalDefault = 500 * time.Millisecond

	// SQLiteWaitChunk is how long one BEGIN IMMEDIATE waits for the
	// database's write lock before Acquire checks ctx and tries again.
	SQLiteWaitChunk = time.Second

	// TryConnWait bounds how long TryAcquire and TryLock wait for a
	// connection from the pool when none was free at the first look (one
	// being returned, or a new one being dialled). A pool seen exhausted
	// fails at once with ErrPoolExhausted.
	TryConnWait = time.Second

	backoffMin = 5 * time.Millisecond
	backoffMax = 500 * time.Millisecond

	// cleanupTimeout bounds the clean-up statements run on behalf of a
	// failed acquisition.
	cleanupTimeout = 10 * time.Second
)

// Config configures a Locker. The zero value means defaults.
type Config struct {
	// Logger receives state changes at Debug and lost locks at Warn.
	// Defaults to none: the library logs nothing unless given a logger.
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
	// idle_transaction_timeout, MySQL 8 wait_timeout, each for the hold
	// only; SQLite has no such bound). The server's bound is the TTL
	// rounded up, never down, to what its setting can say: the millisecond
	// on PostgreSQL, the whole second and at least 2 s on MySQL and MariaDB
	// (dialect.DB.HoldBound). A per-call WithTTL overrides it. Defaults to
	// dblock.TTLDefault (30 s).
	TTL time.Duration
	// WatchInterval is how often a Locker holding locks asks the server,
	// on the Locker's own connection (see Locker), whether the holding
	// sessions still exist. Defaults to WatchIntervalDefault.
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
//
// On PostgreSQL and MySQL a Locker that holds or is taking locks also keeps
// one connection of the pool for itself (taken before the first holder's
// connection, given back once nothing is held): the session watcher asks the
// server on it, fencing tokens are committed on it, and abandoned lock waits
// are cancelled from it, so none of these waits for a pool that holders have
// exhausted. With SetMaxOpenConns(1) there is no room for it: locks work, but
// the watcher is off and WithToken is refused.
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

	side side // The Locker's own connection; lock side.mu before mu, never after.

	mu        sync.Mutex
	holds     map[holdKey]*hold
	all       map[*hold]struct{}
	gates     map[string]*gate
	closed    bool
	watching  bool
	acquiring int // Acquisitions under way (they keep the side connection).
	stop      chan struct{}
	wg        sync.WaitGroup
	bg        sync.WaitGroup // Commits and rollbacks left running by a Release whose ctx ended.

	allowMultiPrimary bool
	exclusive         atomic.Bool // The database's row locks were found to exclude every client.

	hooks4test testHooks
}

// testHooks let this package's tests order events between Lockers (set
// before first use, see export_test.go); nil outside tests.
type testHooks struct {
	// beforeBegin runs in an attempt before its transaction begins (on
	// SQLite, after its tokens were issued).
	beforeBegin func(names []string)
	// watched runs after each pass of the session watcher that asked the
	// server, with the pass's error.
	watched func(err error)
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
		log:      mode.Logger(cfg.Logger),
		lockWait: cfg.LockTimeout,
		ttl:      cfg.TTL,
		interval: cfg.WatchInterval,
		holds:    make(map[holdKey]*hold),
		all:      make(map[*hold]struct{}),
		gates:    make(map[string]*gate),
		stop:     make(chan struct{}),

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
	if err := mode.ValidateTTL(l.ttl); err != nil {
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
	owner    string
	conn     *sqlx.Conn
	tx       *sqlx.Tx
	session  dialect.SessionRef // the locking session; its ID is zero on SQLite
	ttl      time.Duration
	prevBusy time.Duration // SQLite: busy timeout to restore; -1 when untouched
	start    time.Time

	// txCancel cancels the context the transaction began with: database/sql
	// then rolls it back (after a statement in flight) and fails every later
	// statement with sql.ErrTxDone, and pgx gives up a COMMIT or ROLLBACK
	// waiting on the network. It poisons a lost hold.
	txCancel context.CancelFunc

	// spMu serializes the savepoint statements of re-entrant handles and
	// Lock; stack and spSeq are guarded by it.
	spMu  sync.Mutex
	stack []*Lease // re-entrant handles whose savepoint is live, oldest first
	spSeq int

	// Guarded by Locker.mu.
	names      []string
	tokens     map[string]dblock.Token
	count      int
	rollback   bool  // The first handle asked for a rollback of the whole transaction.
	rollbackBy error // Why rollback is set, for the handles that then commit.
	ended      bool
	lost       error
	lastSeen   time.Time
	handles    []*Lease
	gates      []string // gate keys held until the hold ends or is lost
}

// Lease is a held pessimistic lock: the embedded *dblock.Lease (Name, Owner,
// Token, Done, Err, Release) plus the locking transaction. Release commits.
type Lease struct {
	*dblock.Lease
	h        *hold
	ctl      mode.Control
	rollback atomic.Bool

	// sp is the savepoint taken when this handle re-entered the hold ("" for
	// the first handle). voided (guarded by h.spMu) says why its work is
	// gone: an earlier re-entrant handle rolled back to its own savepoint.
	sp     string
	voided error
}

// Tx returns the locking transaction. Statements run on it are part of the
// critical section and commit (or roll back) with the lock. Do not call its
// Commit or Rollback: end the lock with Commit, Rollback or Release.
func (l *Lease) Tx() *sql.Tx { return l.h.tx.Tx }

// Names returns the names this lock holds, in order (several for
// AcquireMany, and those added by Lock).
func (l *Lease) Names() []string {
	l.h.l.mu.Lock()
	defer l.h.l.mu.Unlock()
	return slices.Clone(l.h.names)
}

// TokenOf returns the fencing token of one of the held names (zero when no
// token was asked for).
func (l *Lease) TokenOf(name string) dblock.Token {
	l.h.l.mu.Lock()
	defer l.h.l.mu.Unlock()
	return l.h.tokens[name]
}

// Commit releases the lock by committing its transaction (the same as
// Release). When other handles of the same owner still hold the name, the
// transaction ends with the last of them. It returns an error wrapping
// ErrRolledBack when this handle's work will not be committed: the first
// handle asked for a rollback, an earlier re-entrant handle rolled back past
// this one's savepoint, or (PostgreSQL) a failed statement had aborted the
// transaction. On MySQL and MariaDB, a transaction that the server ended
// (deadlock victim, implicit commit) is found before COMMIT is sent: Commit
// then reports the lock lost (dblock.ErrLost with ErrTxEnded).
//
// ctx bounds the call: when it ends first, the connection is closed (on
// MySQL, its session killed), and an error wrapping dblock.ErrUnavailable
// says that the outcome is unknown.
func (l *Lease) Commit(ctx context.Context) error { return l.Release(ctx) }

// Rollback releases the lock by rolling its transaction back. A re-entrant
// handle (not the first acquisition of the hold) rolls back only its own
// work, to the savepoint taken when it re-entered, and the transaction goes
// on; the first handle's Rollback rolls the whole transaction back, when the
// last handle ends (a later Commit by another handle then reports
// ErrRolledBack).
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
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context, tx *sql.Tx) error, opts ...dblock.Option) error {
	lease, err := l.Acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	return run(ctx, lease, fn)
}

func run(ctx context.Context, lease *Lease, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	fnCtx, cancel := lease.Context(ctx)
	defer cancel()
	relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer relCancel()
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
	return errjoin.Join(fnErr, relErr)
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
	o, err := mode.Resolve(ctx, opts)
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
	if err := refuseLeaseOnly(o); err != nil {
		return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	ttl := l.ttl
	if o.TTLSet {
		ttl = o.TTL
	}
	if o.Token && l.db.Dialect.Kind() != dialect.SQLite && !l.sideWanted() {
		return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, errNoSide)
	}
	start := time.Now()

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("pessimistic: %s %q: %w: %w", op, label, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	if h := l.reentrant(sorted, o.Owner); h != nil {
		l.mu.Unlock()
		return l.reenter(ctx, op, label, h, o, start)
	}
	for _, n := range sorted {
		if h, ok := l.holds[holdKey{n, o.Owner}]; ok && !h.ended && h.lost == nil {
			l.mu.Unlock()
			return nil, fmt.Errorf("pessimistic: %s %q: %w: %q is already held by this owner in another transaction",
				op, label, dblock.ErrInvalidOption, n)
		}
	}
	l.inflight.Add(1)
	defer l.inflight.Done()
	l.acquiring++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.acquiring--
		l.mu.Unlock()
	}()

	// Close ends waits: closeCtx is cancelled with dblock.ErrClosed as its cause.
	// Statements that do not wait keep the caller's ctx: a context that can
	// be cancelled costs the drivers a watcher hand-off per statement.
	closeCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(l.closing, func() { cancel(dblock.ErrClosed) })
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
	// The Locker's own connection comes before the holder's, so that it is
	// never stuck behind holders that exhausted the pool.
	if err := l.reserveSide(waitCtx, try); err != nil {
		l.leaveGates(keys)
		if errors.Is(err, ErrPoolExhausted) || waitCtx.Err() != nil {
			if closeCtx.Err() != nil {
				err = errjoin.Join(err, context.Cause(closeCtx))
			}
			return nil, notAcquiredErr(op, label, nil, err)
		}
		return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
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

// refuseLeaseOnly refuses the options only lease modes can honour: a
// transaction's hold has no lease to cap (dblock.WithMaxHold) and writes
// nothing to its row (dblock.WithMetadata).
func refuseLeaseOnly(o mode.Options) error {
	if o.MaxHold != 0 {
		return fmt.Errorf("%w: WithMaxHold: a pessimistic hold lasts as long as its transaction (bound its work with ctx)", dblock.ErrInvalidOption)
	}
	if o.Metadata != "" {
		return fmt.Errorf("%w: WithMetadata: a pessimistic hold stores no metadata", dblock.ErrInvalidOption)
	}
	return nil
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

func (l *Locker) reenter(ctx context.Context, op, label string, h *hold, o mode.Options, start time.Time) (*Lease, error) {
	fail := func(err error) (*Lease, error) {
		return nil, fmt.Errorf("pessimistic: %s %q: %w", op, label, err)
	}
	h.spMu.Lock()
	defer h.spMu.Unlock()
	l.mu.Lock()
	if h.ended || h.lost != nil {
		l.mu.Unlock()
		return fail(fmt.Errorf("%w: the held transaction ended while re-entering", dblock.ErrNotAcquired))
	}
	needToken := o.Token && h.tokens == nil
	names := slices.Clone(h.names)
	l.mu.Unlock()
	// The token is written before the savepoint, so that a rollback to the
	// savepoint keeps it.
	var tokens map[string]dblock.Token
	if needToken {
		var err error
		if tokens, err = l.bumpTokens(ctx, h, names); err != nil {
			return fail(fmt.Errorf("token: %w", err))
		}
	}
	h.spSeq++
	sp := fmt.Sprintf("dblock_%d", h.spSeq)
	if err := l.db.Savepoint(ctx, h.tx, sp); err != nil {
		l.txTrouble(h, err)
		return fail(fmt.Errorf("savepoint: %w", err))
	}
	l.mu.Lock()
	if h.ended || h.lost != nil {
		l.mu.Unlock()
		return fail(fmt.Errorf("%w: the held transaction ended while re-entering", dblock.ErrNotAcquired))
	}
	if tokens != nil && h.tokens == nil {
		h.tokens = tokens
	}
	h.count++
	lease := l.newHandle(h, label)
	lease.sp = sp
	l.mu.Unlock()
	h.stack = append(h.stack, lease)
	l.acquired(lease, start)
	return lease, nil
}

// txTrouble looks at the error of a statement dblock ran on h's transaction:
// on MySQL, a deadlock or a missing savepoint means that the server rolled
// the whole transaction back, so the lock is gone; a broken connection loses
// it everywhere.
func (l *Locker) txTrouble(h *hold, err error) {
	switch {
	case l.db.Dialect.Kind() == dialect.MySQL && (errors.Is(err, dblock.ErrDeadlock) || dialect.SavepointGone(err)):
		l.abort(h, fmt.Errorf("%w: %w", ErrTxEnded, err))
	case isConnErr(err):
		l.abort(h, dblock.ErrConnLost)
	}
}

// abort marks h lost and ends its transaction at once in database/sql
// (called on the goroutine that saw the loss, so no statement of its own is
// in flight): later statements on Tx fail with sql.ErrTxDone instead of
// running outside the transaction (MySQL runs a deadlock victim's next
// statements in autocommit mode).
func (l *Locker) abort(h *hold, reason error) {
	l.loseThen(h, reason, false, func() { _ = h.tx.Rollback() })
}

// register records a fresh hold and returns its first handle.
func (l *Locker) register(h *hold, o mode.Options, label string, start time.Time) (*Lease, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = h.end(context.Background(), true)
		l.openGates(h)
		return nil, fmt.Errorf("pessimistic: acquire %q: %w: %w", label, dblock.ErrNotAcquired, dblock.ErrClosed)
	}
	h.count = 1
	h.lastSeen = time.Now()
	for _, n := range h.names {
		l.holds[holdKey{n, h.owner}] = h
	}
	l.all[h] = struct{}{}
	lease := l.newHandle(h, label)
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
	dl, ctl := mode.NewLease(mode.LeaseParams{
		Name: label, Owner: h.owner, Mode: dblock.ModePessimistic, Token: int64(max), Reentry: h.count,
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

// releaseHandle ends one handle. A re-entrant handle first settles its
// savepoint (released on commit, rolled back to on rollback); the last
// handle of a hold ends its transaction: commit, or rollback if the first
// handle asked for one or the hold was lost.
func (l *Locker) releaseHandle(ctx context.Context, lease *Lease) error {
	h := lease.h
	rb := lease.rollback.Load()
	var spErr error
	if lease.sp != "" {
		spErr = l.endSavepoint(ctx, lease, rb)
	}
	l.mu.Lock()
	if lease.sp == "" && rb && !h.rollback {
		h.rollback = true
		h.rollbackBy = fmt.Errorf("%w: the first handle of %q asked for a rollback", ErrRolledBack, lease.Name())
	}
	h.count--
	if h.count > 0 {
		if spErr == nil && !rb && h.rollback && h.lost == nil {
			spErr = h.rollbackBy
		}
		l.mu.Unlock()
		l.released(lease, h)
		return spErr
	}
	h.ended = true
	l.forget(h)
	rollback := h.rollback || h.lost != nil
	rollbackBy := h.rollbackBy
	lost := h.lost
	l.mu.Unlock()

	err := l.endBounded(ctx, h, rollback)
	switch {
	case err != nil && lost == nil && (isConnErr(err) || errors.Is(err, ErrTxEnded)):
		reason := dblock.ErrConnLost
		if errors.Is(err, ErrTxEnded) {
			reason = err
		}
		l.lose(h, reason, true)
	case err == nil && rollback && lost == nil && !rb && rollbackBy != nil:
		err = rollbackBy
	}
	if err == nil {
		err = spErr
	}
	l.openGates(h)
	l.released(lease, h)
	return err
}

// endSavepoint settles the savepoint of a re-entrant handle: on commit it is
// released (when it is the newest; an older one is left to the transaction's
// end), on rollback the transaction goes back to it, which also undoes the
// work of every handle that re-entered after this one (their Commit then
// reports ErrRolledBack). It returns the error for this handle's Release.
func (l *Locker) endSavepoint(ctx context.Context, lease *Lease, rb bool) error {
	h := lease.h
	h.spMu.Lock()
	defer h.spMu.Unlock()
	if lease.voided != nil {
		if rb {
			return nil
		}
		return lease.voided
	}
	idx := slices.Index(h.stack, lease)
	if idx < 0 {
		return nil
	}
	l.mu.Lock()
	gone := h.ended || h.lost != nil
	last := h.count == 1
	l.mu.Unlock()
	if gone {
		h.stack = slices.Delete(h.stack, idx, idx+1)
		return nil
	}
	if rb {
		later := h.stack[idx+1:]
		for _, o := range later {
			o.voided = fmt.Errorf("%w: handle %d of %q rolled back to its savepoint, taken before this handle re-entered",
				ErrRolledBack, lease.Reentry(), lease.Name())
		}
		h.stack = h.stack[:idx]
		err := l.db.RollbackToSavepoint(ctx, h.tx, lease.sp)
		if err == nil && !last {
			err = l.db.ReleaseSavepoint(ctx, h.tx, lease.sp)
		}
		if err != nil {
			l.txTrouble(h, err)
			return fmt.Errorf("rollback to savepoint: %w", err)
		}
		return nil
	}
	if idx == len(h.stack)-1 {
		h.stack = h.stack[:idx]
		if last {
			return nil // The transaction ends next; no need to release.
		}
		if err := l.db.ReleaseSavepoint(ctx, h.tx, lease.sp); err != nil {
			l.txTrouble(h, err)
			return fmt.Errorf("release savepoint: %w", err)
		}
		return nil
	}
	h.stack = slices.Delete(h.stack, idx, idx+1)
	return nil
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

// lose marks every handle of h lost with reason and reports whether this
// call did (false if h was already lost, or ended and !ended).
func (l *Locker) lose(h *hold, reason error, ended bool) bool {
	return l.loseThen(h, reason, ended, nil)
}

// loseThen is lose, running before (when not nil) once h is marked lost and
// before anyone is told.
func (l *Locker) loseThen(h *hold, reason error, ended bool, before func()) bool {
	l.mu.Lock()
	if h.lost != nil || h.ended && !ended {
		l.mu.Unlock()
		return false
	}
	h.lost = reason
	handles := slices.Clone(h.handles)
	l.mu.Unlock()
	if before != nil {
		before()
	}
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
	return true
}

// endBounded ends h's transaction (see end) within ctx: when ctx ends
// first, the transaction is interrupted (its connection closed; on MySQL its
// session killed from the Locker's connection), and the error says that the
// outcome is unknown; the connection is destroyed once the driver returns.
func (l *Locker) endBounded(ctx context.Context, h *hold, rollback bool) error {
	if ctx.Done() == nil {
		return h.end(ctx, rollback)
	}
	if l.db.Dialect.Kind() == dialect.Postgres {
		// pgx ends a COMMIT or ROLLBACK whose context (the transaction's)
		// is cancelled at once, network or not: no goroutine is needed to
		// give up on it.
		interrupted := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			close(interrupted)
			l.interrupt(h)
		})
		err := h.end(ctx, rollback)
		if stop() {
			return err
		}
		<-interrupted
		if err == nil {
			return nil
		}
		return fmt.Errorf("%w: %w", err, context.Cause(ctx))
	}
	done := make(chan error, 1)
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		done <- h.end(ctx, rollback)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	l.interrupt(h)
	t := time.NewTimer(interruptGrace)
	defer t.Stop()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		return fmt.Errorf("%w: %w", err, context.Cause(ctx))
	case <-t.C:
		verb := "commit"
		if rollback {
			verb = "rollback"
		}
		return fmt.Errorf("%w: %s did not finish before ctx ended (the connection is being closed): outcome unknown: %w",
			dblock.ErrUnavailable, verb, context.Cause(ctx))
	}
}

// interruptGrace is how long endBounded waits, after interrupting, for the
// driver to return.
const interruptGrace = 100 * time.Millisecond

// interrupt makes the statements under way on h's connection fail: the
// transaction's context is cancelled (pgx closes the connection of a COMMIT
// or ROLLBACK in flight; database/sql rolls back), and on MySQL, whose
// driver cannot be interrupted so, the session is killed from the Locker's
// own connection, unless the server restarted since the lock was taken (a
// session under that id would be someone else's).
func (l *Locker) interrupt(h *hold) {
	h.txCancel()
	if l.db.Dialect.Kind() != dialect.MySQL || h.session.ID == 0 {
		return
	}
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		err := l.withSide(ctx, false, func(q dialect.Querier) error {
			inc, err := l.sideIncarnation(ctx, q)
			if err != nil || !l.onIncarnation(h, inc) {
				return err
			}
			return l.db.KillSession(ctx, q, h.session.ID)
		})
		if err != nil {
			l.log.Warn("pessimistic: kill an interrupted session", "session", h.session.ID, "error", err)
		}
	}()
}

// end finishes the transaction and gives the connection back to the pool,
// or destroys it when the transaction could not be ended cleanly. On MySQL
// it first checks that the server still has the transaction open (see
// dialect.EndHold): if not, it does not pretend to commit, and returns an
// error wrapping ErrTxEnded.
func (h *hold) end(ctx context.Context, rollback bool) (err error) {
	db := h.l.db
	defer h.txCancel()
	verb := "commit"
	if rollback {
		verb = "rollback"
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	h.l.mu.Lock()
	lost := h.lost
	h.l.mu.Unlock()
	if lost == nil {
		// No deadline of its own: a cancellable context costs the MySQL
		// driver a hand-off to its watcher goroutine per statement, and the
		// caller's bound (endBounded) interrupts a statement that hangs.
		open, eerr := db.EndHold(context.WithoutCancel(ctx), h.tx, !rollback)
		if eerr != nil || !open {
			_ = h.tx.Rollback()
			closeConn(h.conn, true)
			if eerr != nil {
				return fmt.Errorf("%s: %w", verb, eerr)
			}
			if !rollback {
				verb += " (not sent)"
			}
			return fmt.Errorf("%s: %w: statements run on Tx after that ran outside it, each committed on its own", verb, ErrTxEnded)
		}
	}
	if rollback {
		err = h.tx.Rollback()
	} else {
		err = h.tx.Commit()
	}
	if lost != nil && errors.Is(err, sql.ErrTxDone) {
		err = nil // Rolled back already when the loss was found.
	}
	if !rollback && dialect.CommitRolledBack(err) {
		// PostgreSQL rolled back a transaction that a failed statement
		// had aborted; the connection is fine.
		err = fmt.Errorf("%w: a statement had failed and aborted the transaction: %w", ErrRolledBack, err)
		closeConn(h.conn, !h.restoreBusy(sctx))
		return fmt.Errorf("%s: %w", verb, err)
	}
	err = db.Classify(err)
	destroy := err != nil || lost != nil
	if !destroy {
		destroy = !h.restoreBusy(sctx)
	}
	closeConn(h.conn, destroy)
	if err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	return nil
}

// restoreBusy puts back the SQLite busy timeout changed for the attempt,
// reporting whether the connection is fit for the pool.
func (h *hold) restoreBusy(ctx context.Context) bool {
	if h.prevBusy < 0 {
		return true
	}
	_, err := h.l.db.SQLiteBusyTimeout(ctx, h.conn, h.prevBusy)
	return err == nil
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

// Close rolls back the locks still held through this Locker, each bounded by
// a clean-up timeout (their handles are ended as lost first: Err wraps
// dblock.ErrLost and dblock.ErrClosed, and a running Do's fn has its context
// cancelled), stops the session watcher and gives the Locker's own
// connection back. It does not close the database.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.stop)
	l.mu.Unlock()
	l.cancelAll(dblock.ErrClosed)
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
	// End the holds as lost before rolling them back, so that code still
	// working under them (a Do's fn) has its context cancelled first.
	for _, lease := range leases {
		lease.ctl.LoseIfHeld(dblock.ErrClosed)
	}
	var errs []error
	for _, lease := range leases {
		lease.rollback.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		err := lease.Release(ctx)
		cancel()
		if err != nil && !errors.Is(err, dblock.ErrReleased) && !errors.Is(err, dblock.ErrLost) && !errors.Is(err, ErrRolledBack) {
			errs = append(errs, err)
		}
	}
	l.wg.Wait()
	l.dropSide()
	waitBounded(&l.bg, cleanupTimeout)
	return errjoin.Join(errs...)
}

// waitBounded waits for wg at most d (a commit stuck on a dead network
// ends with the TCP connection; Close does not wait for it that long).
func waitBounded(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// ---- acquiring ----

// deadConnRetries bounds the attempts one acquisition makes again on
// another connection when the pool handed it a dead one.
const deadConnRetries = 3

// errRetry asks the acquire loop to try again at once (a row was missing).
var errRetry = errors.New("retry")

// errTokenStale asks the acquire loop to try again at once: on SQLite a
// token issued before the lock was overtaken by another acquisition (the
// row's version reached it, or a later token was issued meanwhile).
var errTokenStale = errors.New("token overtaken")

// errCreateBusy asks the acquire loop to try again after a backoff: creating
// a missing row met a lock held by another transaction (MariaDB: the fencing
// floor, or the gap of the missing key).
var errCreateBusy = errors.New("creating the lock row met a lock")

// lock runs acquisition attempts until one succeeds, the wait ends, or an
// error that waiting cannot fix occurs.
func (l *Locker) lock(callCtx, ctx, waitCtx context.Context, op, label string, names []string, o mode.Options, ttl time.Duration, try bool) (*hold, error) {
	notAcquired := func(holder *dialect.Holder, cause error) error {
		return notAcquiredErr(op, label, holder, cause)
	}
	backoff := backoffMin
	missing, stale, busy, dead := 0, 0, 0, 0
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
		case errors.Is(err, driver.ErrBadConn) && dead < deadConnRetries:
			// A pooled connection the server had closed (after an idle
			// timeout, say): the driver sent nothing on it, and the
			// attempt destroyed it; another connection is tried.
			dead++
			continue
		case errors.Is(err, errRetry):
			if missing++; missing > 5 {
				return nil, fmt.Errorf("pessimistic: %s %q: lock row keeps disappearing", op, label)
			}
			continue
		case errors.Is(err, errCreateBusy):
			// Another transaction briefly holds what the insert needs; a
			// try retries a few times within milliseconds, a wait backs
			// off like for a lease holder.
			if busy++; try && busy > 3 {
				return nil, notAcquired(nil, err)
			}
			sleep := backoff + rand.N(backoff/2+1)
			backoff = min(2*backoff, backoffMax)
			t := time.NewTimer(sleep)
			select {
			case <-t.C:
			case <-waitCtx.Done():
				t.Stop()
				return nil, notAcquired(nil, errjoin.Join(err, context.Cause(waitCtx)))
			}
			continue
		case errors.Is(err, dblock.ErrNotAcquired):
			if !try {
				settle(waitCtx)
			}
			if waitCtx.Err() != nil {
				return nil, notAcquired(nil, errjoin.Join(err, context.Cause(waitCtx)))
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
			if errors.Is(err, context.DeadlineExceeded) {
				// A dial or statement cut at waitCtx's deadline can
				// return a moment before waitCtx reports it.
				settle(waitCtx)
			}
			if waitCtx.Err() != nil && ctx.Err() == nil {
				// The client stopped the wait at its bound (MySQL bounds
				// server-side in whole seconds only).
				return nil, notAcquired(nil, context.Cause(waitCtx))
			}
			// ctx merges the caller's context with Close's and may learn of
			// a cancellation a moment after callCtx; either ends the wait.
			for _, c := range []context.Context{ctx, callCtx} {
				if c.Err() != nil {
					return nil, fmt.Errorf("pessimistic: %s %q: %w: %w", op, label, dblock.ErrNotAcquired, errjoin.Join(context.Cause(c), err))
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

// settle waits for ctx's deadline when it is near: the server's lock
// timeout was set to end with it, in whole milliseconds and counted from a
// moment the client only estimates, and may end earlier (on a loaded
// machine, by more than a hair), so that the error then reports the
// deadline as its cause.
// settleWindow is how near the deadline must be for settle to wait for it.
const settleWindow = time.Second

func settle(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	left := time.Until(dl)
	if left > settleWindow {
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
// stands in the way, or an error (errRetry when a row had to be created,
// errCreateBusy when creating it met a lock).
//
// ctx is the caller's context with Close's cancellation, waitCtx adds the
// wait bound; statements that do not wait run on callCtx.
func (l *Locker) attempt(callCtx, ctx, waitCtx context.Context, names []string, o mode.Options, ttl time.Duration, try bool) (*hold, *dialect.Holder, error) {
	db := l.db
	kind := db.Dialect.Kind()
	conn, err := l.poolConn(waitCtx, try)
	if err != nil {
		return nil, nil, err
	}
	h := &hold{l: l, names: names, owner: o.Owner, conn: conn, ttl: ttl, prevBusy: -1, start: time.Now()}
	// release gives the connection back after an attempt that ended cleanly
	// outside a transaction, destroying it if its state cannot be restored.
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		closeConn(conn, !h.restoreBusy(rctx))
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
				closeConn(conn, true)
				return nil, nil, err
			}
		}
	}
	// On SQLite the lock is the database's write transaction, so nothing can
	// make a token durable while it is held: issue the tokens first, each
	// committed on its own on this connection (whose busy timeout is the
	// attempt's: a try fails at once when another writer holds the
	// database), and check under the lock that no one got past them: the
	// row's version is below them and no token was issued after them
	// (SetIssuedToken). The second check matters: a process that issued a
	// later token while this one waited may have got the lock first and
	// died holding it, its transaction (and the row's version) rolled back,
	// yet it had been handed its token; this one's smaller token would come
	// after it. Then the attempt gives the lock up and starts again with new
	// tokens (errTokenStale), so that every token handed out was committed
	// first. A token taken inside the write transaction instead would be
	// rolled back with a holder that died, and could be handed out again,
	// or come after an earlier-issued smaller one.
	var preIssued map[string]dblock.Token
	var lastIssued dblock.Token
	if kind == dialect.SQLite && o.Token {
		preIssued = make(map[string]dblock.Token, len(names))
		for _, n := range names {
			t, err := db.IssueToken(waitCtx, conn, n)
			if err != nil {
				if errors.Is(err, dblock.ErrNotAcquired) {
					release()
				} else {
					closeConn(conn, true)
				}
				return nil, nil, err
			}
			preIssued[n] = t
			lastIssued = max(lastIssued, t)
		}
	}
	if l.hooks4test.beforeBegin != nil {
		l.hooks4test.beforeBegin(names)
	}
	var txCtx context.Context
	begin := func() error {
		// The transaction outlives the call; its context is cancelled only
		// to poison a lost hold (see hold.txCancel).
		txCtx, h.txCancel = context.WithCancel(context.WithoutCancel(callCtx))
		tx, err := conn.BeginTxx(txCtx, nil)
		if err != nil {
			h.txCancel()
			return db.Classify(err)
		}
		h.tx = tx
		return nil
	}
	// fail rolls back and releases the connection, destroying it unless
	// everything ended cleanly.
	fail := func(cause error) error {
		rerr := h.tx.Rollback()
		h.txCancel()
		if rerr != nil {
			closeConn(conn, true)
		} else {
			release()
		}
		return cause
	}
	if err := begin(); err != nil {
		if errors.Is(err, dblock.ErrNotAcquired) {
			release()
		} else {
			closeConn(conn, true)
		}
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
			if err := l.ensureRow(callCtx, n); err != nil {
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
			ok, err := db.SetIssuedToken(callCtx, h.tx, n, preIssued[n], lastIssued)
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
		tokens, err := l.bumpTokens(callCtx, h, names)
		if err != nil {
			return nil, nil, fail(err)
		}
		h.tokens = tokens
	}
	// The server-side bound on a frozen holder (MySQL and MariaDB; set
	// inside the lock statement on PostgreSQL). Set once the lock is held,
	// so a failed attempt leaves nothing to restore.
	if err := db.SetHoldBound(callCtx, h.tx, ttl, h.session.Bound); err != nil {
		return nil, nil, fail(err)
	}
	return h, nil, nil
}

// ensureRow creates name's row (autocommit, outside any lock's transaction)
// on the Locker's own connection when it has one, so it never waits for the
// pool. A refusal for want of a lock (MariaDB: the fencing floor or a gap
// held by another transaction) comes back as errCreateBusy.
func (l *Locker) ensureRow(ctx context.Context, name string) error {
	var err error
	if l.sideWanted() {
		err = l.withSide(ctx, true, func(q dialect.Querier) error { return l.db.EnsureRow(ctx, q, name) })
	} else {
		err = l.db.EnsureRow(ctx, nil, name)
	}
	if errors.Is(err, dblock.ErrNotAcquired) {
		return fmt.Errorf("%w: %w", errCreateBusy, err)
	}
	return err
}

// lockRows locks the rows of names in h's transaction: NOWAIT first (the
// common, uncontended path is one statement), then, unless trying, a wait in
// the database's queue. On PostgreSQL a failed NOWAIT aborts the
// transaction, so the wait starts a new one (begin).
func (l *Locker) lockRows(callCtx, ctx, waitCtx context.Context, h *hold, names []string, ttl time.Duration, try bool, begin func() error) (map[string]dialect.Holder, dialect.SessionRef, error) {
	db := l.db
	kind := db.Dialect.Kind()
	if kind == dialect.SQLite {
		return l.lockStmt(callCtx, h, names, dialect.RowLockParams{IdleTimeout: ttl})
	}
	found, session, err := l.lockStmt(callCtx, h, names, dialect.RowLockParams{NoWait: true, IdleTimeout: ttl})
	if try || !errors.Is(err, dblock.ErrNotAcquired) {
		return found, session, err
	}
	if kind == dialect.Postgres {
		rerr := h.tx.Rollback()
		h.txCancel()
		if rerr != nil {
			return nil, dialect.SessionRef{}, rerr
		}
		if err := begin(); err != nil {
			return nil, dialect.SessionRef{}, err
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
	p := dialect.RowLockParams{Wait: wait, IdleTimeout: ttl}
	if kind != dialect.MySQL {
		return l.lockStmt(qctx, h, names, p)
	}
	// On MySQL the driver gives up a wait by closing the connection, which
	// the server does not notice while the statement waits: cancel the
	// server's wait too, so it is never granted the lock afterwards.
	id, err := db.SessionID(callCtx, h.tx)
	if err != nil {
		return nil, dialect.SessionRef{}, err
	}
	var cancelled chan struct{}
	stop := l.cancelOnDone(qctx, id, &cancelled, names)
	found, session, err = l.lockStmt(qctx, h, names, p)
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

// cancelOnDone cancels, from the Locker's own connection, the statement that
// session id runs when ctx ends; *done is closed when that cancel returns.
// Call the returned stop after the statement: false means the cancel ran
// (or runs): wait for *done before the session runs anything else.
func (l *Locker) cancelOnDone(ctx context.Context, id int64, done *chan struct{}, names []string) (stop func() bool) {
	ch := make(chan struct{})
	*done = ch
	return context.AfterFunc(ctx, func() {
		defer close(ch)
		kctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		err := l.withSide(kctx, false, func(q dialect.Querier) error { return l.db.CancelStatement(kctx, q, id) })
		if errors.Is(err, errNoSide) {
			err = l.db.CancelStatement(kctx, nil, id)
		}
		if err != nil {
			l.log.Warn("pessimistic: cancel an abandoned lock wait", "lock_key", labelOf(names), "error", err)
		}
	})
}

// lockStmt runs one lock statement on h's transaction for names.
func (l *Locker) lockStmt(ctx context.Context, h *hold, names []string, p dialect.RowLockParams) (map[string]dialect.Holder, dialect.SessionRef, error) {
	if len(names) == 1 {
		rl, err := l.db.LockRow(ctx, h.tx, names[0], p)
		if err != nil || !rl.Found {
			return nil, dialect.SessionRef{}, err
		}
		return map[string]dialect.Holder{names[0]: rl.Holder}, rl.Session, nil
	}
	rows, session, err := l.db.LockRows(ctx, h.tx, names, p)
	if err != nil {
		return nil, dialect.SessionRef{}, err
	}
	found := make(map[string]dialect.Holder, len(rows))
	for _, r := range rows {
		found[r.Name] = r.Holder
	}
	return found, session, nil
}

// bumpTokens gives each of names a fencing token, committed on the Locker's
// own connection before it is written into the row in h's transaction.
func (l *Locker) bumpTokens(ctx context.Context, h *hold, names []string) (map[string]dblock.Token, error) {
	if l.db.Dialect.Kind() == dialect.SQLite {
		return nil, fmt.Errorf("%w: on SQLite a token can only be asked for by the first acquisition of a lock (it is issued before the database is locked)", dblock.ErrInvalidOption)
	}
	tokens := make(map[string]dblock.Token, len(names))
	for _, n := range names {
		var t dblock.Token
		err := l.withSide(ctx, true, func(q dialect.Querier) error {
			var err error
			t, err = l.db.BumpTokenOn(ctx, h.tx, q, n)
			return err
		})
		if err != nil {
			return nil, err
		}
		tokens[n] = t
	}
	return tokens, nil
}
