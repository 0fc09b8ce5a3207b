// Package leasemode is the wiring the lease modes (optimistic, fairqueue)
// share: the store behind the user's handle, the logger and hooks, the
// Keeper of their leases, the wake-up hub, and the lifecycle that Close
// ends. Each mode keeps its own waiting; this package holds what would
// otherwise be written twice.
package leasemode
