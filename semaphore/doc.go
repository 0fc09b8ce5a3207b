// Package semaphore provides counting semaphores whose permits are leases:
// at most Limit permits of a name out at once, each grant owned, renewed
// while held and given back by its Release or, when its holder dies, by its
// expiry by the database clock, with nobody calling.
//
//	s, _ := semaphore.New(db, nil)
//	err := s.Do(ctx, "api-key:42", 5, 1, func(ctx context.Context) error { return call(ctx) })
//
// Semantics:
//   - A semaphore is created with the limit its first caller names; a
//     caller naming another limit gets ErrLimitMismatch, never more
//     permits. SetLimit changes it: lowering it below the permits out takes
//     none away and grants nothing until they are under the new limit.
//   - Each grant has an owner and a token (its id); a second release of it
//     is refused (dblock.ErrReleased), and a grant that expired reports
//     dblock.ErrExpired.
//   - Grants are serialised per name by a short transaction on the
//     semaphore's row, which counts the unexpired permits by the database
//     clock. Waiters are not ordered (a large request may wait while small
//     ones are granted) unless Config.Fair is set: fair requests then queue
//     in dblock_waiters (apart from the locks of the same name) and are
//     granted in arrival order.
//   - Each attempt at a grant carries a request id of its own, which the
//     grant records (column request of dblock_permits: PostgreSQL
//     migration 00020, MySQL 00029, SQLite 00011). An attempt whose answer
//     was lost (its connection broke after the grant may have committed) is
//     read back by that id before anything else is sent: the call returns
//     the lease of the grant it made, so no permits stay out until an
//     expiry; when the read itself cannot be made, TryAcquire fails saying
//     the outcome is unknown, and Acquire reads again before it asks.
//
// Semaphores are names of their own: a semaphore and a lock of the same
// name do not exclude each other.
package semaphore
