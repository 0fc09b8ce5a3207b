// Package wake is the per-Locker wake-up hub of the lease modes. On PostgreSQL
// one dedicated connection LISTENs on store.NotifyChannel and wakes the
// waiters of a name when its release is announced; a release announced for
// one owner (a name a reservation keeps for that owner's waiter, the notice
// name + store.NoticeSep + owner) wakes only that owner's subscriptions
// (SubscribeFor) and those of every owner (Subscribe). A release is announced
// only while its name's row is marked as listened for: a subscription marks it
// (in the subscriber's goroutine, before the subscriber asks again) and the
// hub renews the marks of its subscribed names (marks.go); a semaphore's
// waits, whose releases are announced anyway, subscribe unmarked
// (SubscribeUnmarked). A fair waiter's subscription counts its notices
// (SubscribeCounted), and its quiet test keeps a notice from waking it
// while its own Locker holds the name (the notice is counted still). On
// other databases, or
// where LISTEN cannot work (a pooler in transaction mode), the hub is a no-op
// and waiters rely on their backoff and expiry timers; the hub is an
// optimisation, never a correctness mechanism.
package wake
