// Package history records who held which lock, when, and how each
// acquisition ended: one entry per acquisition of a lease (optimistic,
// fair, an election's term) in the table dblock_history, which the
// migrations create.
//
// History is opt-in and per database: Enable adds a trigger on dblock_locks
// that writes an entry in the very statement that ends an acquisition (a
// release, a takeover of an expired lease, the reaper freeing an expired
// one, an administrator's forced release), so an entry is never lost and
// never written for an acquisition that did not end. Disable drops the
// trigger; the entries stay. The reaper deletes entries past
// reaper.Config.HistoryRetention; Prune does the same on demand.
//
// Times are the database's. An entry's Ended says how it ended:
//
//   - Released: its holder released it (the last release of a re-entered hold);
//   - Expired: its lease ran out and it was freed (by the reaper, or by a
//     release that came too late);
//   - TakenOver: another owner took the name after the lease ran out;
//   - ForceReleased: an administrator freed it (dblock release --force).
//
// Pessimistic locks are transactions and leave no entry.
//
// PostgreSQL and SQLite keep a history. MySQL and MariaDB do not yet: they
// report no insert id for a statement that fired a trigger, and dblock reads
// every token from the insert id, so Enable, List and Prune refuse there with
// an error wrapping dblock.ErrInvalidOption (and Enabled reports false). For
// the same reason, never add a trigger of your own to dblock_locks there.
package history
