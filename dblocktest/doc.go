// Package dblocktest helps users test code that takes dblock locks, without
// a database server and without sleeps.
//
// Locker is an in-memory dblock.Locker with the optimistic mode's lease
// contract (names, owners, re-entry, tokens that only grow per name, Done,
// Err, Release, Do, Close, hooks, and the loss errors), driven by a Clock
// the test moves and by fault injection:
//
//   - Clock.Advance moves time: live holders' leases are renewed, leases
//     whose renewals were stopped (StopRenewing) or whose max hold came run
//     out, lost with dblock.ErrExpired;
//   - Expire, ForceRelease, DropConnection and TakeOver end a hold now, lost
//     with ErrExpired, ErrForceReleased, ErrConnLost or ErrTakenOver;
//   - FailAcquires makes the next acquisitions fail (dblock.ErrUnavailable
//     by default);
//   - Holders tells who holds what.
//
// Waiting acquisitions are woken when the name frees; no timer runs, so a
// test that moves the clock or injects a fault sees its effect at once.
//
// What it does not model: the database (isolation levels, row locks,
// fencing of the application's own rows, the reaper), the network (only
// DropConnection stands for it), pessimistic transactions and the fair
// queue's order, and real time: dblock.WithWait and contexts still bound
// waits in real time, and a lease's Deadline is real time too. Test the
// code against a real database as well (SQLite gives one per test).
package dblocktest
