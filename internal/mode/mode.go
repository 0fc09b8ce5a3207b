package mode

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/errjoin"
	"github.com/dblock-go/dblock/internal/hook"
	"github.com/dblock-go/dblock/internal/obs"
)

// LeaseParams describe a lease a mode has just acquired.
type LeaseParams = hook.LeaseParams

// Control is held by the mode that created a lease.
type Control = hook.LeaseControl

// Options are one call's resolved options.
type Options = hook.Options

// NewLease returns a held lease and its control.
func NewLease(p LeaseParams) (*dblock.Lease, Control) {
	l, c := hook.NewLease(p)
	return l.(*dblock.Lease), c
}

// Resolve applies opts over the defaults and validates the result; every
// error wraps dblock.ErrInvalidOption.
func Resolve(ctx context.Context, opts []dblock.Option) (Options, error) {
	return hook.ResolveOptions(ctx, opts)
}

// ValidateTTL returns an error wrapping dblock.ErrInvalidOption unless
// dblock.TTLMin <= ttl <= dblock.TTLMax.
func ValidateTTL(ttl time.Duration) error { return hook.ValidateTTL(ttl) }

// ValidateOwner returns an error wrapping dblock.ErrInvalidOption for an
// empty, over-long, NUL-containing or invalid UTF-8 owner.
func ValidateOwner(owner string) error { return hook.ValidateOwner(owner) }

// ValidateMetadata returns an error wrapping dblock.ErrInvalidOption for
// metadata over dblock.MaxMetadataLen bytes, invalid UTF-8 or with a NUL.
func ValidateMetadata(md string) error { return hook.ValidateMetadata(md) }

// discard is the logger of a component given none: the library is silent
// unless the application hands it a logger.
var discard = slog.New(slog.DiscardHandler)

// Logger returns l, or a logger that writes nothing when l is nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return discard
	}
	return l
}

// Run runs fn under lease's context (cancelled with the loss as cause if the
// lock is lost), then releases the lease on a context that outlives ctx,
// bounded by releaseTimeout. It returns fn's error; when the lock was lost
// while fn ran, the *dblock.LostError is returned too (joined), because fn's
// work was not exclusive to the end.
//
// If fn panics (or calls runtime.Goexit), fn's context is cancelled and the
// lease released before the panic goes on up the stack: a panic recovered
// further up never leaves the name held, nor its renewal running.
func Run(ctx context.Context, lease *dblock.Lease, releaseTimeout time.Duration, fn func(ctx context.Context) error) error {
	fnCtx, cancel := lease.Context(ctx)
	defer cancel()
	release := func() error {
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer relCancel()
		return lease.Release(relCtx)
	}
	returned := false
	defer func() {
		if !returned {
			// fn panicked: no recover, so the panic resumes, with its
			// own stack, once this has released.
			cancel()
			_ = release()
		}
	}()
	fnErr := fn(fnCtx)
	returned = true
	cancel()
	relErr := release()
	if relErr != nil {
		if errors.Is(relErr, dblock.ErrLost) {
			return errjoin.Join(fnErr, relErr)
		}
		if fnErr == nil {
			return relErr
		}
		return errjoin.Join(fnErr, relErr)
	}
	return fnErr
}

// Do is the Do of the lease modes: acquire name (waiting), run fn under the
// lease (see Run), release, all under one span of rec (obs.SpanDo).
func Do(ctx context.Context, rec *obs.Recorder, acquire func(context.Context, string, ...dblock.Option) (*dblock.Lease, error),
	name string, opts []dblock.Option, releaseTimeout time.Duration, fn func(ctx context.Context) error) (err error) {
	ctx, span := rec.BeginSpan(ctx, obs.SpanDo, name)
	var token dblock.Token
	defer func() { obs.EndSpan(span, token, err) }()
	lease, err := acquire(ctx, name, opts...)
	if err != nil {
		return err
	}
	token = lease.Token()
	return Run(ctx, lease, releaseTimeout, fn)
}
