package pessimistic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/telemetry"
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

	// ErrMultiPrimary is returned (wrapped) by the first acquisition on a
	// node of a multi-primary (Galera) cluster, unless
	// Config.AllowMultiPrimary: there a row lock does not exclude the
	// clients of the other nodes.
	ErrMultiPrimary = store.ErrMultiPrimary
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
	// Telemetry chooses where metrics and spans go. Defaults to the
	// global OpenTelemetry providers (recording nothing unless the
	// application installed an SDK).
	Telemetry *telemetry.Config
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
	// on PostgreSQL, the whole second and at least 2 s on MySQL and MariaDB.
	// A per-call WithTTL overrides it. Defaults to
	// dblock.TTLDefault (30 s).
	TTL time.Duration
	// WatchInterval is how often a Locker holding locks asks the server,
	// on the Locker's own connection (see Locker), whether the holding
	// sessions still exist. Defaults to WatchIntervalDefault.
	WatchInterval time.Duration
	// AllowMultiPrimary lets pessimistic locks run on a node of a Galera
	// cluster. By default the first acquisition there fails with
	// ErrMultiPrimary: a row lock holds on one node only, so two
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
	db       *store.DB
	caps     store.Caps // What the database can do; the Locker never asks its kind.
	log      *slog.Logger
	events   obs.Events
	rec      *obs.Recorder
	lockWait time.Duration
	ttl      time.Duration
	interval time.Duration
	// endBound bounds the commit or rollback that ends Do's transaction,
	// from fn's return: cleanupTimeout (tests shorten it).
	endBound time.Duration

	inflight sync.WaitGroup // The acquisitions under way (admitted).

	side side // The Locker's own connection; lock side.mu before mu, never after.

	mu        sync.Mutex
	holds     map[holdKey]*hold
	all       map[*hold]struct{}
	gates     map[string]*gate
	freeGates []*gate // Unused gates kept for reuse (see newGate).
	closed    bool
	watching  bool
	// admitted holds the acquisitions under way: they keep the side
	// connection, and Close cancels their waits (request.closeWait).
	admitted map[*request]struct{}
	stop     chan struct{}
	wg       sync.WaitGroup
	bg       sync.WaitGroup // Commits and rollbacks left running by a Release whose ctx ended.

	allowMultiPrimary bool
	// checkedCommit: a hold's COMMIT checks, in the same statement, that
	// the server still has the transaction open (store.ChecksCommit).
	checkedCommit bool
	// deferBegin: a hold's BEGIN goes with its lock statement, in one round
	// trip (store.DefersBegin).
	deferBegin bool
	// beginsInCall: the deferred BEGIN is MariaDB's lock call
	// (store.BeginsInCall), used only while the Locker is otherwise idle
	// (defersBegin).
	beginsInCall bool
	exclusive    atomic.Bool // The database's row locks were found to exclude every client.

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
func New(handle *dialect.DB, cfg *Config) (*Locker, error) {
	db := store.Of(handle)
	if db == nil {
		return nil, fmt.Errorf("pessimistic: new: %w: nil database", dblock.ErrInvalidOption)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	l := &Locker{
		db:       db,
		caps:     db.Dialect.Caps(),
		log:      mode.Logger(cfg.Logger),
		lockWait: cfg.LockTimeout,
		ttl:      cfg.TTL,
		interval: cfg.WatchInterval,
		endBound: cleanupTimeout,
		holds:    make(map[holdKey]*hold),
		all:      make(map[*hold]struct{}),
		admitted: make(map[*request]struct{}),
		gates:    make(map[string]*gate),
		stop:     make(chan struct{}),

		allowMultiPrimary: cfg.AllowMultiPrimary,
		checkedCommit:     db.ChecksCommit(),
		deferBegin:        db.DefersBegin(),
		beginsInCall:      db.BeginsInCall(),
	}
	rec, err := obs.New(cfg.Telemetry, string(db.Dialect.Kind()), dblock.ModePessimistic)
	if err != nil {
		return nil, fmt.Errorf("pessimistic: new: %w", err)
	}
	l.rec, l.events = rec, obs.NewEvents(cfg.Hooks, rec)
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
	for r := range l.admitted {
		r.closeWait(dblock.ErrClosed)
	}
	l.mu.Unlock()
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
	// A hold's first lock statement on a pool may have started its
	// preparation in the background (bounded by the pool's own timeout).
	l.db.WaitPreparing()
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
