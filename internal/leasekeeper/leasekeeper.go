package leasekeeper

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
	"github.com/dblock-go/dblock/internal/mode"
	"github.com/dblock-go/dblock/internal/obs"
	"github.com/dblock-go/dblock/internal/store"
)

// Config configures a Keeper.
type Config struct {
	DB *store.DB
	// Prefix starts log messages ("fairqueue").
	Prefix string
	// Logger defaults to one that writes nothing.
	Logger *slog.Logger
	// Events hear of releases, losses and failed renewals (acquisitions
	// are the mode's to report).
	Events obs.Events
	// RetryMin is the shortest pause before retrying a failed renewal.
	RetryMin time.Duration
	// ReleaseTimeout bounds Close's releases, the reads that classify a
	// loss, and each attempt of a release (a connection that stops
	// answering is given up, and the release tried again on another).
	ReleaseTimeout time.Duration
	// CountStatement, when set, is called once per statement sent.
	CountStatement func()
	// WriteMu, when set, is held around every write. On SQLite, which has one
	// writer per database, a Locker serialises its own writes in process
	// rather than letting them collide on the database lock and back off.
	WriteMu sync.Locker
}

// Keeper keeps the leases of one Locker. It is safe for concurrent use.
type Keeper struct {
	cfg    Config
	logger *slog.Logger

	mu      sync.Mutex
	held    map[*dblock.Lease]*held
	reentry map[nameOwner]map[dblock.Token]int // Live handles per hold, for Lease.Reentry.
	names   map[string]int                     // Live handles per name.
	spare   []map[dblock.Token]int             // Emptied maps of reentry, for reuse (tokenMap).
	closed  bool
	wg      sync.WaitGroup // Watchdogs.
}

type holdKey struct {
	name, owner string
	token       dblock.Token
}

type nameOwner struct{ name, owner string }

// New returns a Keeper.
func New(cfg Config) *Keeper {
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 5 * time.Millisecond
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	return &Keeper{cfg: cfg, logger: mode.Logger(cfg.Logger),
		held: map[*dblock.Lease]*held{}, reentry: map[nameOwner]map[dblock.Token]int{}, names: map[string]int{}}
}

// Params describe a lease just acquired.
type Params struct {
	Name, Owner, Mode string
	Token             dblock.Token
	TTL               time.Duration
	// MaxHold, when positive, caps the hold: renewals (every TTL/3) never
	// carry the lease past ReqStart + MaxHold.
	MaxHold time.Duration
	// ReqStart is when the acquiring statement was sent (monotonic clock):
	// the lease can be trusted until ReqStart + TTL.
	ReqStart time.Time
	// Reentry is the owner's acquisition count the database reported, or 0
	// to count the handles live in this Keeper instead.
	Reentry int
	// OnReleased, when set, runs with Name after a release statement
	// succeeded. A mode passes the same func for every lease (a closure per
	// lease would cost an allocation per acquisition).
	OnReleased func(name string)
	// Rows are the lease's statements; nil: an exclusive lease of
	// dblock_locks.
	Rows Rows
	// MinHold, when positive, makes the release of a lease of dblock_locks
	// leave it held until MinHold after its acquisition by the database
	// clock, when that is still ahead (dblock.WithMinHold).
	MinHold time.Duration
	// Granted, when positive and shorter, replaces the TTL as the first
	// lease: the database granted less than asked (a reader joining a
	// period that ends sooner). Renewals ask for the TTL.
	Granted time.Duration
}

// firstTTL is the lease the acquisition asked for: TTL, or MaxHold when shorter.
func (p Params) firstTTL() time.Duration {
	ttl := p.TTL
	if p.Granted > 0 && p.Granted < ttl {
		ttl = p.Granted
	}
	if p.MaxHold > 0 && p.MaxHold < ttl {
		return p.MaxHold
	}
	return ttl
}

// Start returns the handle of a lease just acquired and starts its watchdog.
// After Close it releases the lease in the database and returns dblock.ErrClosed.
func (k *Keeper) Start(p Params) (*dblock.Lease, error) {
	h := &held{
		k: k, p: p, key: holdKey{p.Name, p.Owner, p.Token},
		watchDone: make(chan struct{}), deadline: p.ReqStart.Add(p.firstTTL()), acquired: time.Now(),
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		relCtx, relCancel := context.WithTimeout(context.Background(), k.cfg.ReleaseTimeout)
		defer relCancel()
		k.count()
		_, _ = k.rows(p).Release(relCtx, p.Name, p.Owner, p.Token)
		return nil, dblock.ErrClosed
	}
	no := nameOwner{p.Name, p.Owner}
	tokens := k.reentry[no]
	if tokens == nil {
		tokens = k.tokenMap()
		k.reentry[no] = tokens
	}
	tokens[p.Token]++
	k.names[p.Name]++
	reentry := tokens[p.Token]
	if p.Reentry > 0 {
		reentry = p.Reentry
	}
	h.lease, h.ctl = mode.NewLease(mode.LeaseParams{
		Name: p.Name, Owner: p.Owner, Mode: p.Mode, Token: int64(p.Token), Reentry: reentry,
		Deadline: h.deadline, Release: h.release,
	})
	k.held[h.lease] = h
	k.wg.Add(1)
	k.mu.Unlock()
	h.armWatch()
	return h.lease, nil
}

// Handles returns the number of live handles of k on (name, owner, token):
// the reentry count the database should show when every acquisition of
// that hold went through k.
func (k *Keeper) Handles(name, owner string, token dblock.Token) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.reentry[nameOwner{name, owner}][token]
}

// Holds reports whether k has a live handle on name for owner.
func (k *Keeper) Holds(name, owner string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.reentry[nameOwner{name, owner}]) > 0
}

// HoldsName reports whether k has a live handle on name, for any owner.
func (k *Keeper) HoldsName(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.names[name] > 0
}

// HandlesOf returns, per token, the number of live handles of k on name for owner.
func (k *Keeper) HandlesOf(name, owner string) map[dblock.Token]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := map[dblock.Token]int{}
	for token, n := range k.reentry[nameOwner{name, owner}] {
		m[token] = n
	}
	return m
}

// Lost is for a mode that found, in a statement of its own, that lease no
// longer holds: it reads the row to say why, marks the lease lost (once)
// and returns the reason.
func (k *Keeper) Lost(ctx context.Context, lease *dblock.Lease) error {
	k.mu.Lock()
	h := k.held[lease]
	k.mu.Unlock()
	if h == nil {
		return dblock.ErrExpired
	}
	reason := h.classify(ctx)
	h.lose(reason)
	return reason
}

// Held returns the number of leases held through k.
func (k *Keeper) Held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// Close ends every lease still held and frees its row (bounded by
// Config.ReleaseTimeout), stops the watchdogs and waits for them. Later
// Starts fail with dblock.ErrClosed.
//
// A lease ended by Close is lost to its holder, not released by it: Done
// closes and Err wraps dblock.ErrLost and Config.Closed before the row is
// freed, so code still working under the lease (Do's fn, whose context is
// cancelled) learns that the lock is gone. Hooks see the release
// (OnReleased), not a loss. A lease whose Release is already under way is
// left to it.
func (k *Keeper) Close() error {
	k.mu.Lock()
	k.closed = true
	holds := make([]*held, 0, len(k.held))
	for _, h := range k.held {
		holds = append(holds, h)
	}
	k.mu.Unlock()

	for _, h := range holds {
		if h.ctl.LoseIfHeld(dblock.ErrClosed) {
			k.logger.LogAttrs(context.Background(), slog.LevelDebug, k.cfg.Prefix+": lease ended by Close", h.attrs()...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.cfg.ReleaseTimeout)
	defer cancel()
	var errs []error
	for _, h := range holds {
		err := h.lease.Release(ctx)
		var lost *dblock.LostError
		switch {
		case err == nil || errors.Is(err, dblock.ErrReleased):
		case errors.As(err, &lost) && error(lost) == err:
			// Only the loss (Close's own, or an earlier one): the row was
			// freed, or was no longer ours.
		default:
			errs = append(errs, err)
		}
	}
	k.wg.Wait()
	return errors.Join(errs...)
}

func (k *Keeper) count() {
	if k.cfg.CountStatement != nil {
		k.cfg.CountStatement()
	}
}

// lockWrites holds Config.WriteMu, if any, and returns its unlock.
func (k *Keeper) lockWrites() func() {
	if k.cfg.WriteMu == nil {
		return func() {}
	}
	k.cfg.WriteMu.Lock()
	return k.cfg.WriteMu.Unlock
}

func (k *Keeper) forget(h *held) {
	k.mu.Lock()
	if _, ok := k.held[h.lease]; ok {
		delete(k.held, h.lease)
		if k.names[h.key.name]--; k.names[h.key.name] <= 0 {
			delete(k.names, h.key.name)
		}
		no := nameOwner{h.key.name, h.key.owner}
		tokens := k.reentry[no]
		if tokens[h.key.token]--; tokens[h.key.token] <= 0 {
			delete(tokens, h.key.token)
			if len(tokens) == 0 {
				delete(k.reentry, no)
				k.spareTokens(tokens)
			}
		}
	}
	k.mu.Unlock()
}

// maxSpareTokenMaps bounds the emptied token maps a Keeper keeps for reuse.
const maxSpareTokenMaps = 64

// tokenMap returns an empty map for k.reentry: an emptied one kept by
// spareTokens (a name taken and given back over and over allocates none),
// or a new one. k.mu is held.
func (k *Keeper) tokenMap() map[dblock.Token]int {
	if n := len(k.spare); n > 0 {
		m := k.spare[n-1]
		k.spare = k.spare[:n-1]
		return m
	}
	return map[dblock.Token]int{}
}

// spareTokens keeps an emptied token map for tokenMap, up to
// maxSpareTokenMaps. k.mu is held.
func (k *Keeper) spareTokens(m map[dblock.Token]int) {
	if len(k.spare) < maxSpareTokenMaps {
		k.spare = append(k.spare, m)
	}
}

// held is the state of one lease: its watchdog and its release.
type held struct {
	k         *Keeper
	p         Params
	key       holdKey
	lease     *dblock.Lease
	ctl       mode.Control
	acquired  time.Time
	watchDone chan struct{} // Closed once the watchdog ended, or was stopped before it started.

	// ctx is the watchdog's, set when it starts (see armWatch) and
	// cancelled when Release begins or the lease is lost; it belongs to
	// the lease, not to any caller.
	ctx  context.Context
	stop context.CancelFunc

	mu       sync.Mutex
	deadline time.Time  // Local monotonic time until which the lease can be trusted.
	watching watchState // Guarded by mu.
	wake     *time.Timer
}

func (h *held) attrs(extra ...slog.Attr) []slog.Attr {
	return append([]slog.Attr{slog.String("lock_key", h.p.Name), slog.String("owner", h.p.Owner),
		slog.Int64("token", int64(h.p.Token))}, extra...)
}

func (h *held) currentDeadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// watch renews the lease every TTL/3 when asked to, and declares it lost
// when the local deadline passes without a successful renewal or a renewal
// finds the row no longer ours. The loss is declared after watchDone closes,
// so an OnLost hook may call Release (which waits for watchDone).
func (h *held) watch() {
	defer h.k.wg.Done()
	reason := h.renewLoop()
	close(h.watchDone)
	if reason != nil {
		h.lose(reason)
	}
}

// lose ends the lease with reason, once, and reports it. Outside Release it
// also stops the watchdog: a lease found lost by a mode's own statement
// (Keeper.Lost) must not keep renewing, nor keep Close waiting for its
// local deadline.
func (h *held) lose(reason error) {
	if !h.ctl.Lose(reason) {
		return
	}
	if !h.ctl.Releasing() {
		h.k.forget(h)
		h.halt()
	}
	h.k.logger.LogAttrs(context.Background(), slog.LevelWarn, h.k.cfg.Prefix+": lease lost",
		h.attrs(slog.String("error", reason.Error()))...)
	h.k.cfg.Events.Lost(h.p.Name, h.p.Owner, h.p.Token, &dblock.LostError{Name: h.p.Name, Reason: reason}, time.Since(h.acquired))
}

// classify reads the row to say why a CAS on (name, owner, token) found
// nothing: the lease ran out, another owner or a newer token holds the row,
// or an administrator freed it.
func (h *held) classify(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.k.cfg.ReleaseTimeout)
	defer cancel()
	expiredLocally := !time.Now().Before(h.currentDeadline())
	h.k.count()
	row, err := h.k.rows(h.p).Holder(ctx, h.p.Name, h.p.Owner, h.p.Token)
	switch {
	case err != nil:
		if expiredLocally {
			return fmt.Errorf("%w (row unreadable: %w)", dblock.ErrExpired, err)
		}
		return fmt.Errorf("%w (row unreadable: %w)", dblock.ErrTakenOver, err)
	case row.Owner == h.p.Owner && row.Version == int64(h.p.Token):
		return dblock.ErrExpired
	case !row.Exists || row.Owner == "" && row.Mode != dblock.ModePessimistic:
		// The database never ends a lease before the local deadline, so a
		// row freed earlier was freed by an administrator.
		if expiredLocally {
			return dblock.ErrExpired
		}
		return dblock.ErrForceReleased
	default:
		return dblock.ErrTakenOver
	}
}

// release is the Lease's release: it stops renewal first, then runs the CAS.
func (h *held) release(ctx context.Context) (err error) {
	ctx, span := h.k.cfg.Events.BeginSpan(ctx, obs.SpanRelease, h.p.Name)
	defer func() { obs.EndSpan(span, h.p.Token, err) }()
	h.halt()
	<-h.watchDone
	defer h.k.forget(h)
	ok, err := h.releaseRow(ctx)
	switch {
	case err == nil && ok:
		h.released(ctx)
		return nil
	case err == nil:
		h.lose(h.classify(ctx))
		return nil // The Lease reports the loss.
	}
	if expired := (*pastDeadline)(nil); errors.As(err, &expired) {
		// The lease ran out before the release could be confirmed: it
		// ended by expiry, and the Lease reports that loss.
		h.lose(fmt.Errorf("%w before its release was confirmed (last attempt: %v)", dblock.ErrExpired, expired.last))
		return nil
	}
	return err
}

// released is the end of a confirmed release: logged, the mode told
// (OnReleased), the event recorded.
func (h *held) released(ctx context.Context) {
	if h.k.logger.Enabled(ctx, slog.LevelDebug) { // Attributes are built only when wanted.
		h.k.logger.LogAttrs(ctx, slog.LevelDebug, h.k.cfg.Prefix+": released", h.attrs()...)
	}
	if h.p.OnReleased != nil {
		h.p.OnReleased(h.p.Name)
	}
	h.k.cfg.Events.Released(h.p.Name, h.p.Owner, h.p.Token, time.Since(h.acquired))
}

// releaseRow runs the release CAS, retrying transient failures until ctx
// ends or the lease's local deadline passes (renewal has stopped, so from
// then on the lease ends by expiry anyway; the error is then a
// *pastDeadline): a statement that may not wait
// for a row lock (MariaDB's NOWAIT variant, SQLite's busy timeout) fails
// while another transaction briefly holds the row, a connection breaks, and
// a release given up on would leave the name held until the lease expires.
// Each attempt is bounded by Config.ReleaseTimeout, so a connection that
// stops answering (a black-holed server) is given up and the release tried
// again on another, even when ctx has no deadline.
//
// A statement whose connection broke (or that timed out) may have
// committed. Before sending it again, the row is read: if it no longer
// names (owner, token), or its reentry count is already below this Keeper's
// handles on the hold, the earlier attempt was applied, and a second
// decrement would release an outer handle's hold. (The count is only this
// Keeper's: an owner that re-enters one hold from several processes, and
// loses a release's answer, can release one entry too many.)
func (h *held) releaseRow(ctx context.Context) (bool, error) {
	backoff := h.k.cfg.RetryMin
	uncertain := false // An earlier attempt may have been applied.
	var lastErr error
	for attempt := 1; ; attempt++ {
		if uncertain {
			actx, cancel := context.WithTimeout(ctx, h.k.cfg.ReleaseTimeout)
			h.k.count()
			row, err := h.k.rows(h.p).Holder(actx, h.p.Name, h.p.Owner, h.p.Token)
			cancel()
			if err != nil {
				lastErr = err
			} else {
				if row.Owner != h.p.Owner || row.Version != int64(h.p.Token) || row.Reentry < h.k.Handles(h.p.Name, h.p.Owner, h.p.Token) {
					return true, nil
				}
				uncertain = false
			}
		}
		if !uncertain {
			actx, cancel := h.k.cfg.DB.StatementContext(ctx, h.k.cfg.ReleaseTimeout)
			h.k.count()
			unlock := h.k.lockWrites()
			ok, err := h.k.rows(h.p).Release(actx, h.p.Name, h.p.Owner, h.p.Token)
			unlock()
			timedOut := actx.Err() != nil && ctx.Err() == nil
			cancel()
			if err == nil || ctx.Err() != nil || !timedOut && !Transient(err) {
				return ok, err
			}
			lastErr = err
			// A broken connection, or an attempt given up on, may have
			// been applied.
			uncertain = timedOut || errors.Is(err, dblock.ErrUnavailable)
			h.k.logger.LogAttrs(ctx, slog.LevelDebug, h.k.cfg.Prefix+": release failed, retrying",
				h.attrs(slog.Int("attempt", attempt), slog.String("error", err.Error()))...)
		}
		pause := jitter(backoff)
		left := time.Until(h.currentDeadline())
		last := left < pause
		if last {
			// No time for another attempt: wait out the local deadline, so
			// that the expiry the release then reports has happened (the
			// database's deadline is never earlier).
			pause = max(left, 0)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("%w: release not confirmed: %w", dblock.ErrUnavailable, context.Cause(ctx))
		}
		if last {
			return false, &pastDeadline{last: lastErr}
		}
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}

// pastDeadline is releaseRow's error when the lease's local deadline passed
// before a release attempt succeeded; last is the last attempt's error.
type pastDeadline struct{ last error }

func (e *pastDeadline) Error() string {
	return fmt.Sprintf("lease deadline passed before the release was confirmed: %v", e.last)
}

// Transient reports whether a statement's error is worth retrying as it is:
// a lock not available, a deadlock or serialization failure, or a database
// that is briefly unavailable.
func Transient(err error) bool {
	return errors.Is(err, dblock.ErrUnavailable) || store.IsRetryable(err) || errors.Is(err, driver.ErrBadConn)
}

// WaitRetryable reports whether a call that waits retries a statement
// that failed with err: a transient error, or the statement's own timeout
// (a server that stopped answering) while the call's ctx runs. A
// statement's context must not end with ctx's but by its own deadline
// (store.DB.StatementContext over context.WithoutCancel). Its outcome may
// be unknown (OutcomeUnknown): the caller settles it before it asks again.
func WaitRetryable(ctx context.Context, err error) bool {
	return Transient(err) || errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// jitter spreads a pause over [d/2, d] (backoff.Jitter).
var jitter = backoff.Jitter

// OutcomeUnknown reports whether a failed acquire may have committed: its
// connection broke or its statement timed out. A statement the server
// refused (a deadlock, a missing table), or that never reached it (no
// connection could be made), changed nothing.
func OutcomeUnknown(err error) bool {
	if store.NotSent(err) {
		return false
	}
	return errors.Is(err, dblock.ErrUnavailable) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
