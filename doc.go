// Package dblock is distributed locking on the SQL database an application
// already runs: PostgreSQL, MySQL/MariaDB, or SQLite as the zero-setup default.
// This root package holds the vocabulary every mode shares: errors, options,
// owner identity, name rules, fencing tokens and the Lease handle.
//
// # Modes
//
// All modes share one table (dblock_locks, one row per name) and so one
// namespace: a name held in one mode is held for every other.
//
//   - optimistic: a lease on the name's row, taken and released by single
//     compare-and-swap statements. No connection or transaction is held
//     between calls, so a lock can be held for hours and works through
//     transaction-pooling proxies.
//   - pessimistic: SELECT ... FOR UPDATE on the name's row, held by a
//     transaction. The critical section runs in that transaction; a dead client
//     frees the lock the moment its connection drops.
//   - fairqueue: leases handed out in arrival order through a wait queue
//     (dblock_waiters).
//   - rwlock: many readers or one writer; a name held by readers is held for
//     every exclusive mode, and the other way round.
//
// Beside the locks: semaphore (at most N owned, leased grants of a name, in
// a namespace of their own), election (a leader per name), and schedule
// (cron jobs run once per slot across replicas).
//
// # Owner
//
// An owner is an opaque string. Every acquisition gets a fresh owner unless the
// caller names one (WithOwner, ContextWithOwner); naming the owner that holds a
// name re-enters it, and the name is free again when every acquisition is
// released. Two goroutines never re-enter each other's lock by accident.
//
// # Lease
//
// Lease locks expire by the database clock, never a client's. A lease lasts
// its TTL (WithTTL, default TTLDefault) and is renewed every TTL/3 in the
// background until released; WithMaxHold caps the whole hold, so a lease that
// is never renewed is WithTTL(d) with WithMaxHold(d), and WithMinHold keeps
// it at least that long after its acquisition even when released sooner. The
// holder trusts its lease only until a local deadline — the monotonic time at
// which it sent the request plus the TTL — which is never later than the
// database's expiry.
//
// # Token
//
// Every acquisition returns a fencing token strictly greater than any token
// issued before for that name, even after the reaper deleted an idle row.
// A lease does not make a holder's writes safe by itself: a paused process can
// wake after its lease ended and write anyway. Pass the token to the resource
// and have it reject writes carrying an older token than one it has seen.
//
// # Lost
//
// A holder learns without polling that its lock is gone: Lease.Done is closed
// and Lease.Err says why (ErrExpired, ErrTakenOver, ErrForceReleased,
// ErrConnLost, all wrapped in a *LostError matching ErrLost). Do cancels its
// function's context with that error as the cause. Release after a loss
// returns the *LostError.
//
// # Errors
//
// Errors wrap the sentinels of this package, whatever the mode or database:
// errors.Is(err, ErrNotAcquired) for a name held elsewhere (a *HeldError names
// the holder), ErrNotHeld, ErrLost, ErrReleased, ErrInvalidName,
// ErrInvalidOption, ErrDeadlock, ErrSerialization, ErrSchemaMissing,
// ErrUnavailable. The driver's error stays in the chain for errors.As.
//
// An error from an acquire or release whose statement may have reached the
// database means "unknown", not "failed": the statement may have committed.
// dblock cleans up after such outcomes by owner where it can.
package dblock
