// Package soak holds a randomized mixed-mode soak test: several goroutines
// in this process and in two more OS processes take a handful of names in
// every mode at once (optimistic, single and AcquireMany; pessimistic, handle
// and Do, with and without tokens; fair), guard their work inside a
// transaction of their own, and meanwhile an administrator force-releases
// names and reaper passes free expired leases and delete idle rows with a
// tiny retention. It runs on PostgreSQL, MySQL/MariaDB and SQLite, for about
// fifteen seconds each in `make test` (DBLOCK_SOAK=2m for longer, as `make
// soak` does), and prints its seed on failure (DBLOCK_SOAK_SEED replays it).
//
// # What it checks, and why that is sound
//
// Every critical section writes one row to soak_sections, in a transaction
// that commits only while the lock is still held: for a lease, a transaction
// in which optimistic.Locker.Guard first checks (and keeps until commit)
// that the row still names the holder's owner and token unexpired; for a
// pessimistic lock, the locking transaction itself. The row carries the
// section's start (the database clock read after the acquisition returned)
// and its end (the database clock read by the insert, under the lock). So
// every recorded interval lies within a real hold by database time, and a
// holder that lost its lock records nothing. The checks, per name, over the
// recorded sections in start order:
//   - no two overlap (each ends before the next starts);
//   - fencing tokens (where a section has one) strictly increase.
//
// Every error a call returns must wrap a documented sentinel
// (dblock.ErrNotAcquired, ErrLost, ErrNotHeld, ErrConnLost, ErrDeadlock,
// ErrSerialization, or ErrUnavailable when a loaded server refuses a
// connection) or be the caller's own context's error. After Close, no goroutine and no
// connection of the process's lockers is left.
package soak
