package dblock

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock/internal/hook"
)

// Modes, as stored in the mode column and shown by `dblock status`.
const (
	ModeOptimistic  = "optimistic"
	ModePessimistic = "pessimistic"
	ModeFair        = "fair"
	// ModeRead is a name held by readers (package rwlock): the row names
	// no owner; each reader's lease is its own.
	ModeRead = "read"
	// ModeWrite is a name held by a writer of package rwlock.
	ModeWrite = "write"
	// ModeSemaphore is a grant of a semaphore's permits (package semaphore).
	ModeSemaphore = "semaphore"
	// ModeSchedule is a scheduled job's run (package schedule).
	ModeSchedule = "schedule"
)

const (
	// TTLDefault is the lease length of an acquisition that names no TTL.
	TTLDefault = 30 * time.Second

	// TTLMin is the shortest TTL (and max hold) accepted. A lease shorter than a few round
	// trips cannot be held usefully.
	TTLMin = 10 * time.Millisecond

	// TTLMax is the longest TTL accepted (one year).
	TTLMax = 365 * 24 * time.Hour
)

// Token is a fencing token: every acquisition of a name returns a token strictly
// greater than any token issued earlier for that name (reentrant acquisitions
// by the holding owner share the holding's token). Pass it to the resource you
// protect and have the resource reject writes carrying an older token.
type Token int64

// Option configures one acquisition. Every mode gives an option the same
// meaning, and a mode refuses, with ErrInvalidOption, an option it cannot
// honour.
type Option func(*options)

// options are the per-call settings of Acquire, TryAcquire and Do.
type options = hook.Options

// WithOwner makes the acquisition use owner; acquiring a name this owner
// already holds re-enters it. Without it the owner comes from the context
// (ContextWithOwner), else every acquisition gets a fresh NewOwner().
func WithOwner(owner string) Option { return func(o *options) { o.Owner = owner } }

// WithTTL sets the lease length: how long a silent holder (crashed, frozen,
// cut off) keeps the name. The database's clock decides expiry. While the
// holder lives, the lease is renewed in the background every TTL/3 (up to
// WithMaxHold, if given). Default TTLDefault.
//
// In pessimistic mode the TTL bounds how long the server lets the locking
// transaction sit idle (idle_in_transaction_session_timeout,
// idle_transaction_timeout), kept alive while the holder lives: the same
// promise, kept by the server.
func WithTTL(ttl time.Duration) Option {
	return func(o *options) { o.TTL = ttl; o.TTLSet = true }
}

// WithMaxHold caps the whole hold: renewals never ask for more than what is
// left of d counted from the acquiring request, so the holder stops trusting
// the lease by then (Done closes; Err wraps ErrLost and ErrExpired) and the
// database frees the name at most a round trip later. A lease that is never
// renewed is WithTTL(d) together with WithMaxHold(d). Lease modes only:
// pessimistic mode refuses it.
func WithMaxHold(d time.Duration) Option { return func(o *options) { o.MaxHold = d } }

// WithMinHold keeps the lock until d after it was acquired, by the database
// clock, even when it is released sooner: the release then leaves the lease
// held until that time instead of freeing it (a re-entered hold's inner
// releases are unaffected). A job run on several hosts whose clocks differ
// by less than d then runs once (ShedLock's lockAtLeastFor). Lease modes on
// dblock_locks only (optimistic, fair, an rwlock's write side); pessimistic
// mode, read leases and semaphore grants refuse it.
func WithMinHold(d time.Duration) Option { return func(o *options) { o.MinHold = d } }

// WithWait bounds how long Acquire waits for the name. WithWait(0) tries once.
// Without it, Acquire waits until ctx ends.
func WithWait(d time.Duration) Option {
	return func(o *options) { o.Wait = d; o.HasWait = true }
}

// WithMetadata stores small free text with the lock, shown by `dblock status`:
// at most MaxMetadataLen bytes of valid UTF-8 without NUL bytes. Lease modes
// only: a pessimistic hold writes nothing to its row, and refuses it.
func WithMetadata(s string) Option { return func(o *options) { o.Metadata = s } }

// WithToken asks a pessimistic lock for a fencing token (a write in the
// locking transaction). Lease modes always return one, so there it changes
// nothing.
func WithToken() Option { return func(o *options) { o.Token = true } }

func init() {
	hook.ResolveOptions = func(ctx context.Context, opts any) (hook.Options, error) {
		return resolveOptions(ctx, opts.([]Option))
	}
	hook.ValidateTTL = validateTTL
	hook.ValidateOwner = validateOwner
	hook.ValidateMetadata = validateMetadata
}

// resolveOptions applies opts over the defaults and validates the result.
// Every error wraps ErrInvalidOption.
func resolveOptions(ctx context.Context, opts []Option) (options, error) {
	var o options
	if len(opts) > 0 {
		// Applied to a copy on the heap (an Option may keep its pointer),
		// so that o stays on the stack of a call without options.
		p := new(options)
		for _, opt := range opts {
			if opt != nil {
				opt(p)
			}
		}
		o = *p
	}
	if o.Owner == "" {
		if ctxOwner, ok := OwnerFromContext(ctx); ok {
			o.Owner = ctxOwner
		} else {
			o.Owner = NewOwner()
		}
	}
	if err := validateOwner(o.Owner); err != nil {
		return o, err
	}
	if !o.TTLSet {
		o.TTL = TTLDefault
	} else if err := validateTTL(o.TTL); err != nil {
		return o, err
	}
	if o.MaxHold != 0 {
		if err := validateTTL(o.MaxHold); err != nil {
			return o, fmt.Errorf("max hold: %w", err)
		}
	}
	if o.MinHold != 0 {
		if err := validateTTL(o.MinHold); err != nil {
			return o, fmt.Errorf("min hold: %w", err)
		}
		if o.MaxHold != 0 && o.MinHold > o.MaxHold {
			return o, fmt.Errorf("%w: min hold %v is longer than max hold %v", ErrInvalidOption, o.MinHold, o.MaxHold)
		}
	}
	if o.HasWait && o.Wait < 0 {
		return o, fmt.Errorf("%w: wait %v is negative", ErrInvalidOption, o.Wait)
	}
	if err := validateMetadata(o.Metadata); err != nil {
		return o, err
	}
	return o, nil
}

// validateTTL returns an error wrapping ErrInvalidOption unless TTLMin <= ttl <= TTLMax.
func validateTTL(ttl time.Duration) error {
	if ttl < TTLMin || ttl > TTLMax {
		return fmt.Errorf("%w: ttl %v out of range [%v, %v]", ErrInvalidOption, ttl, TTLMin, TTLMax)
	}
	return nil
}

// Hooks observe lock events, for metrics and tracing. Every field is optional.
// Hooks run synchronously on the calling goroutine and must not block.
type Hooks struct {
	OnAcquired func(name, owner string, token Token, waited time.Duration)
	OnReleased func(name, owner string, token Token, held time.Duration)
	OnLost     func(name, owner string, token Token, err error)
}

// Locker is what every mode offers under one contract: optimistic and fair
// lockers implement it directly, the pessimistic locker through an adapter.
type Locker interface {
	// Acquire waits for name (bounded by ctx and WithWait) and returns the held lease.
	Acquire(ctx context.Context, name string, opts ...Option) (*Lease, error)
	// TryAcquire returns at once: the lease, or an error wrapping ErrNotAcquired.
	TryAcquire(ctx context.Context, name string, opts ...Option) (*Lease, error)
	// Do acquires name, runs fn under a context cancelled if the lock is lost,
	// and releases.
	Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error
	// Close ends the leases still held through this locker, as lost (Done
	// closes, Err wraps ErrLost and ErrClosed, a running Do's fn
	// has its context cancelled), then frees them (best effort, bounded in
	// time), and stops its background work.
	Close() error
}
