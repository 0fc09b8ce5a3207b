package dblock

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Every mode returns errors that wrap exactly these, so callers
// write errors.Is(err, dblock.ErrNotAcquired) whatever the mode and the database.
// The driver's own error stays in the chain, so errors.As still finds it.
var (
	// ErrNotAcquired: the name is held by another owner, or the wait ran out
	// (ctx, the wait option, or the database's lock timeout). Returned by
	// Acquire and TryAcquire. A *HeldError in the chain names the holder when known.
	ErrNotAcquired = errors.New("dblock: not acquired")

	// ErrNotHeld: a release, renewal or guard by someone who does not hold the
	// name (another owner, or a lease that is no longer ours).
	ErrNotHeld = errors.New("dblock: not held")

	// ErrLost: a lock this process held is gone. Lease.Err and Release after a
	// loss return an error that wraps ErrLost and the reason (ErrExpired,
	// ErrTakenOver, ErrForceReleased, ErrConnLost).
	ErrLost = errors.New("dblock: lock lost")

	// ErrExpired: the lease ran out before it was renewed or released.
	ErrExpired = errors.New("dblock: lease expired")

	// ErrTakenOver: the row names another owner or a newer token.
	ErrTakenOver = errors.New("dblock: taken over by another owner")

	// ErrForceReleased: an administrator released the lock (dblock release --force).
	ErrForceReleased = errors.New("dblock: released by an administrator")

	// ErrConnLost: the connection that held a transaction-scoped lock died.
	ErrConnLost = errors.New("dblock: holding connection lost")

	// ErrReleased: Release was already called on this handle.
	ErrReleased = errors.New("dblock: released already")

	// ErrInvalidName: empty, over 255 bytes, invalid UTF-8 or NUL-containing names.
	ErrInvalidName = errors.New("dblock: invalid lock name")

	// ErrInvalidOption: a bad TTL, wait, owner, identifier, DSN or configuration.
	ErrInvalidOption = errors.New("dblock: invalid option")

	// ErrDeadlock: the database chose this transaction as a deadlock victim
	// (PostgreSQL 40P01; MySQL/MariaDB 1213, which a Galera cluster also
	// returns when a transaction fails certification: either way the server
	// rolled the whole transaction back). Retryable, from the start of the
	// transaction (see dialect.IsRetryable).
	ErrDeadlock = errors.New("dblock: deadlock detected")

	// ErrSerialization: the transaction's snapshot conflicts with a
	// concurrent commit (PostgreSQL 40001 serialization failure; SQLite
	// SQLITE_BUSY_SNAPSHOT in a deferred transaction). Retryable, from the
	// start of the transaction.
	ErrSerialization = errors.New("dblock: serialization failure")

	// ErrSchemaMissing: the dblock tables do not exist. The message says which
	// migration command to run.
	ErrSchemaMissing = errors.New("dblock: schema missing")

	// ErrUnavailable: the database cannot serve the request (connection refused,
	// a Galera node without quorum, shutting down). The outcome of a write that
	// failed this way is unknown.
	ErrUnavailable = errors.New("dblock: database unavailable")

	// ErrClosed: the Locker was closed. Waits it ended return an error
	// wrapping ErrNotAcquired and ErrClosed; leases it ended report a
	// *LostError with ErrClosed as the reason.
	ErrClosed = errors.New("dblock: locker closed")

	// ErrConflict: an optimistic compare-and-swap on a user's row found another
	// version (see *ConflictError).
	ErrConflict = errors.New("dblock: version conflict")
)

// HeldError reports who holds a name that could not be acquired. It matches
// ErrNotAcquired with errors.Is.
type HeldError struct {
	Name      string
	Owner     string    // Empty when the holder is a transaction (pessimistic) or unknown.
	Mode      string    // Mode of the holder, when known.
	ExpiresAt time.Time // Zero when the hold has no lease (pessimistic) or is unknown.
	Cause     error     // Optional underlying error (a lock timeout, ctx.Err()).
}

func (e *HeldError) Error() string {
	holder := "another owner"
	if e.Owner != "" {
		holder = fmt.Sprintf("owner %q", e.Owner)
	} else if e.Mode == ModePessimistic {
		holder = "a pessimistic transaction"
	} else if e.Mode == ModeRead {
		holder = "readers"
	}
	s := fmt.Sprintf("dblock: %q not acquired: held by %s", e.Name, holder)
	if !e.ExpiresAt.IsZero() {
		s += fmt.Sprintf(" until %s", e.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is reports whether target is ErrNotAcquired.
func (e *HeldError) Is(target error) bool { return target == ErrNotAcquired }

// Unwrap returns the underlying cause, if any.
func (e *HeldError) Unwrap() error { return e.Cause }

// ConflictError is returned by the helpers that guard writes to users' own
// rows: a compare-and-swap that found another version than Want, or (Fence
// true) a fenced write whose token Want is older than the fence Found that a
// newer lock holder already wrote. Found is -1 when the row is missing.
type ConflictError struct {
	Table string
	Key   any
	Want  int64
	Found int64
	Fence bool
}

func (e *ConflictError) Error() string {
	switch {
	case e.Found < 0 && e.Fence:
		return fmt.Sprintf("dblock: fenced write to %s %v with token %d: row not found", e.Table, e.Key, e.Want)
	case e.Found < 0:
		return fmt.Sprintf("dblock: version conflict on %s %v: expected version %d, row not found", e.Table, e.Key, e.Want)
	case e.Fence:
		return fmt.Sprintf("dblock: fenced write to %s %v refused: token %d is older than the fence %d (a newer lock holder wrote)",
			e.Table, e.Key, e.Want, e.Found)
	}
	return fmt.Sprintf("dblock: version conflict on %s %v: expected version %d, found %d", e.Table, e.Key, e.Want, e.Found)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// LostError is the error of a lost lock: it matches ErrLost and its Reason.
type LostError struct {
	Name   string
	Reason error // ErrExpired, ErrTakenOver, ErrForceReleased, ErrConnLost, or a database error.
}

func (e *LostError) Error() string {
	return fmt.Sprintf("dblock: %q lost: %s", e.Name, strings.TrimPrefix(fmt.Sprint(e.Reason), "dblock: "))
}

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the reason.
func (e *LostError) Unwrap() error { return e.Reason }
