package hook

import (
	"context"
	"time"
)

// LeaseParams describe a lease a mode has just acquired.
type LeaseParams struct {
	Name    string
	Owner   string
	Mode    string
	Token   int64
	Reentry int
	// Deadline is the local time until which the holder can trust the lease
	// (request start + TTL, on the monotonic clock); zero when the hold has
	// no lease (a pessimistic transaction).
	Deadline time.Time
	// Release ends the hold in the database. It is called at most once, by
	// the first Release call, and should itself stop any background renewal
	// before it writes.
	Release func(ctx context.Context) error
}

// LeaseControl is held by the mode that created a lease: it reports losses
// and moves the local deadline after renewals.
type LeaseControl interface {
	// Lose marks the lease lost with reason (ErrExpired, ErrTakenOver, ...).
	// It reports whether this call ended the lease; losses after Release has
	// finished or after an earlier loss are ignored.
	Lose(reason error) bool
	// LoseIfHeld marks the lease lost only while it is held and its Release
	// has not begun.
	LoseIfHeld(reason error) bool
	// SetDeadline moves the local trust deadline after a renewal.
	SetDeadline(t time.Time)
	// Releasing reports whether Release has been called.
	Releasing() bool
}

// Options are one call's resolved options.
type Options struct {
	// Owner of the acquisition: WithOwner, else the context's owner, else a
	// fresh owner.
	Owner string
	// TTL is the lease length: how long a silent holder keeps the name.
	TTL time.Duration
	// TTLSet reports whether WithTTL was given (else TTL is the default).
	TTLSet bool
	// MaxHold caps the whole hold (zero: no cap).
	MaxHold time.Duration
	// MinHold keeps the lock held until this long after its acquisition,
	// by the database clock, when released sooner (zero: no floor).
	MinHold time.Duration
	// Wait bounds Acquire's wait when HasWait; zero means try once.
	Wait    time.Duration
	HasWait bool
	// Metadata is free text stored with the lock.
	Metadata string
	// Token asks a pessimistic lock for a fencing token.
	Token bool
}

// Set by package dblock's init.
var (
	// NewLease returns a held *dblock.Lease (as any) and its control.
	NewLease func(p LeaseParams) (lease any, ctl LeaseControl)
	// ResolveOptions resolves a []dblock.Option (as any) over the defaults;
	// every error wraps dblock.ErrInvalidOption.
	ResolveOptions func(ctx context.Context, opts any) (Options, error)
	// ValidateTTL, ValidateOwner and ValidateMetadata return errors wrapping
	// dblock.ErrInvalidOption.
	ValidateTTL      func(ttl time.Duration) error
	ValidateOwner    func(owner string) error
	ValidateMetadata func(metadata string) error
)

// FirstTTL is the lease an acquisition asks for: the TTL, or the max hold
// when that is shorter.
func (o Options) FirstTTL() time.Duration {
	if o.MaxHold > 0 && o.MaxHold < o.TTL {
		return o.MaxHold
	}
	return o.TTL
}
