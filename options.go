package dblock

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Modes, as stored in the mode column and shown by `dblock status`.
const (
	ModeOptimistic  = "optimistic"
	ModePessimistic = "pessimistic"
	ModeFair        = "fair"
)

const (
	// TTLDefault is the lease of an acquisition that names no TTL. Such a
	// lease is renewed in the background every TTLDefault/3 until released.
	TTLDefault = 30 * time.Second

	// TTLMin is the shortest TTL accepted. A lease shorter than a few round
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

// Options are the per-call settings of Acquire, TryAcquire and Do, built from
// Option values by ResolveOptions.
type Options struct {
	// Owner of the acquisition. Defaults to the context's owner
	// (ContextWithOwner), else a fresh NewOwner().
	Owner string
	// TTL of the lease. Zero means TTLDefault with background renewal.
	TTL time.Duration
	// Renew reports whether the lease is renewed in the background every TTL/3
	// while held. True when no TTL was given; with an explicit TTL, only when
	// WithRenewal(true) was passed.
	Renew bool
	// Wait bounds how long Acquire waits; HasWait reports whether it was set.
	// Without it, Acquire waits until ctx ends. WithWait(0) tries once.
	Wait    time.Duration
	HasWait bool
	// Metadata is free text stored with the lock (host, pid, purpose): at
	// most MaxMetadataLen bytes of valid UTF-8 without NUL bytes.
	Metadata string
	// Token asks a pessimistic lock for a fencing token (a write in the
	// locking transaction). Lease modes always return one.
	Token bool

	explicitTTL bool
	renewSet    bool
}

// Option configures one acquisition.
type Option func(*Options)

// WithOwner makes the acquisition use owner; acquiring a name this owner
// already holds re-enters it.
func WithOwner(owner string) Option { return func(o *Options) { o.Owner = owner } }

// WithTTL sets the lease; with it there is no background renewal unless
// WithRenewal(true) is also given.
func WithTTL(ttl time.Duration) Option {
	return func(o *Options) { o.TTL = ttl; o.explicitTTL = true }
}

// WithRenewal turns background renewal (every TTL/3) on or off.
func WithRenewal(on bool) Option { return func(o *Options) { o.Renew = on; o.renewSet = true } }

// WithWait bounds how long Acquire waits for the name. WithWait(0) tries once.
func WithWait(d time.Duration) Option {
	return func(o *Options) { o.Wait = d; o.HasWait = true }
}

// WithMetadata stores small free text with the lock, shown by `dblock status`:
// at most MaxMetadataLen bytes of valid UTF-8 without NUL bytes.
func WithMetadata(s string) Option { return func(o *Options) { o.Metadata = s } }

// WithToken asks a pessimistic lock for a fencing token.
func WithToken() Option { return func(o *Options) { o.Token = true } }

// ResolveOptions applies opts over the defaults and validates the result. Every
// error wraps ErrInvalidOption.
func ResolveOptions(ctx context.Context, opts ...Option) (Options, error) {
	var o Options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.Owner == "" {
		if ctxOwner, ok := OwnerFromContext(ctx); ok {
			o.Owner = ctxOwner
		} else {
			o.Owner = NewOwner()
		}
	}
	if err := ValidateOwner(o.Owner); err != nil {
		return o, err
	}
	if o.explicitTTL {
		if err := ValidateTTL(o.TTL); err != nil {
			return o, err
		}
		if !o.renewSet {
			o.Renew = false
		}
	} else {
		o.TTL = TTLDefault
		if !o.renewSet {
			o.Renew = true
		}
	}
	if o.HasWait && o.Wait < 0 {
		return o, fmt.Errorf("%w: wait %v is negative", ErrInvalidOption, o.Wait)
	}
	if err := ValidateMetadata(o.Metadata); err != nil {
		return o, err
	}
	return o, nil
}

// ValidateTTL returns an error wrapping ErrInvalidOption unless TTLMin <= ttl <= TTLMax.
func ValidateTTL(ttl time.Duration) error {
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
	// closes, Err wraps ErrLost and the mode's ErrClosed, a running Do's fn
	// has its context cancelled), then frees them (best effort, bounded in
	// time), and stops its background work.
	Close() error
}

// LoggerOrDefault returns l, or slog.Default() when l is nil.
func LoggerOrDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
