// Package userrows guards writes to the application's own rows, the
// resource a lock protects, rather than the lock itself:
//
//   - FencedUpdate writes a row only while its fence column is not above the
//     writer's fencing token (dblock.Lease.Token), and raises the fence to
//     it: the database itself refuses a holder that was superseded, even
//     one that still believes it holds the lock.
//   - CAS and CASRetry are compare-and-swap on a version column: an update
//     that only applies if nobody changed the row since it was read
//     (optimistic concurrency without any lock), reporting a
//     *dblock.ConflictError otherwise.
//
// Table and column names are validated (letters, digits, underscores; a
// table may be schema-qualified) and quoted; values always travel as bind
// parameters. Every function runs on a *sql.DB, *sql.Tx or *sql.Conn, so it
// can join the caller's own transaction (with optimistic.Locker.Guard, say).
package userrows
