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
//
// Semaphores are names of their own: a semaphore and a lock of the same
// name do not exclude each other.
package semaphore
