// Package locktest is the conformance suite every lock mode must pass, on
// every dialect: mutual exclusion, reentrancy, expiry and takeover (by
// expiry and by another owner's write), TryAcquire, owner-only release (also
// by a stranger's release statement), the lost signal, renewal stopping when
// Release begins, Guard (for modes that have one), fencing monotonicity (also
// across the reaper's deletions), cancellation while waiting, bad input,
// Release twice, Do (also when fn panics), Close (ending held leases as lost,
// also under a running Do) and leaks (goroutines, and the connections of
// every pool) after Close. RunProcesses adds a multi-process stress test.
//
// RunRW and RunSemaphore are the shared locks' properties, with and without
// the fair option, on every dialect: never a writer together with anyone
// and tokens in order (from the holders' own record of their critical
// sections, each with a Locker of its own as processes would have), never
// more permits out than the limit (as the holders and as the database count
// them), a crashed holder's read or permits back at their expiry by the
// database's clock with nobody calling, a writer not starved by readers
// that keep the name read without a gap, and arrival order with the fair
// option (a large semaphore request not starved by small ones). The
// multi-process stress with SIGKILLs of the shared locks is
// internal/sharedstress.
//
// The checks reach the store behind the Lockers only through an Env: Run
// and RunOn build one on a test database for a mode's Factory, and RunEnv
// takes any other (dblocktest's in-memory Database passes the suite that
// way, less the checks that need a database of their own: a row blocked by
// another transaction, Guard).
//
// A mode's test package calls Run with a Factory that builds its Locker on
// iso.DB (the suite checks that pool for open connections after Close), and
// calls WorkerMain first thing in TestMain, then goleak.VerifyTestMain with
// LeakOptions:
//
//	func TestMain(m *testing.M) {
//		locktest.WorkerMain(func(db *dialect.DB) dblock.Locker { ... })
//		goleak.VerifyTestMain(m, locktest.LeakOptions()...)
//	}
//
// The suite closes every Locker the Factory returns (once, at the end of the
// check); a Factory must not close it itself.
package locktest
