// Package history records who held which lock, when, and how each
// acquisition ended: one entry per acquisition (of a lease: optimistic,
// fair, an rwlock's write lock or one reader's read lock, a semaphore grant,
// an election's term; and of a pessimistic hold) in the table
// dblock_history, which the migrations create. A reader's entry carries its
// period's token, a grant's its own.
//
// History is opt-in and per database: Enable adds triggers (on dblock_locks,
// and on the readers' shares and the semaphore grants) that write an entry
// in the very statement that ends an acquisition (a release, a takeover of
// an expired lease, the reaper freeing an expired one, an administrator's
// forced release), so an entry is never lost and never written for an
// acquisition that did not end. Disable drops the triggers; the entries
// stay. The reaper deletes entries past
// reaper.Config.HistoryRetention; Prune does the same on demand.
//
// Times are the database's. An entry's Ended says how it ended:
//
//   - Released: its holder released it (the last release of a re-entered hold);
//   - Expired: its lease ran out and it was freed (by the reaper, or by a
//     release that came too late);
//   - TakenOver: another owner took the name after the lease ran out;
//   - ForceReleased: an administrator freed it (dblock release --force);
//   - ConnectionLost: a pessimistic hold's session ended (its connection
//     died, or the server ended it);
//   - Aborted: the server rolled a pessimistic hold's transaction back (a
//     deadlock victim on MySQL or MariaDB).
//
// A pessimistic hold writes no row, so the trigger does not see it: its
// Locker writes the entry once the hold has ended (Release before it
// returns, a loss's in the background, which Close waits for); its token
// is zero unless the hold asked for one (dblock.WithToken). A process
// killed while holding leaves no entry for that hold. A Locker learns that
// the history was enabled or disabled through another pool within five
// seconds.
//
// PostgreSQL, MariaDB and SQLite keep a history. MySQL 8 does not: it
// reports no insert id for a statement that fired a trigger, and dblock
// reads its tokens there from the insert id (MariaDB's statements return
// theirs as a row), so Enable, List and Prune refuse there with an error
// wrapping dblock.ErrInvalidOption (and Enabled reports false). For the
// same reason, never add a trigger of your own to dblock_locks on MySQL 8.
package history
