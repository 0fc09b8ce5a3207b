// Package leasekeeper keeps lease locks (the dblock_locks rows of the
// optimistic and fair modes) once they are acquired: it builds the
// *dblock.Lease handle, renews the lease in the background when asked
// (Redisson's watchdog), declares it lost when a renewal finds the row no
// longer ours or the local deadline passes, and releases it with the
// owner-only CAS. How a lease was acquired is the mode's business; what
// happens after is the same for every lease mode.
//
// The watchdog of a lease is a goroutine started by a timer when its first
// event is due (the first renewal at TTL/3, or the local deadline if a
// short MaxHold puts it earlier): a hold that ends sooner, as most do,
// costs one timer and no goroutine (watch.go).
//
// Invariants: renewal stops before the release statement runs (Release
// cancels the watchdog and waits for it), a transient renewal error is
// retried until the local deadline and never reported as a loss before it,
// the local deadline (request start + TTL on the monotonic clock) is never
// later than the database's expiry, a lease lost by any path stops its
// watchdog at once, and every statement runs under its own timeout.
package leasekeeper
