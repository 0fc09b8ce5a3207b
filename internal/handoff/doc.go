// Package handoff holds what a waiter asleep in its Locker's line keeps for
// the Locker's releases, which may hand it the name in their own statement
// (fairqueue's releases, and optimistic's on PostgreSQL): a release claims
// the waiter while it sleeps (parked), runs the statement, and leaves the
// outcome (a Result) for the waiter, which wakes to it. A waiter whose
// sleep ends while it is claimed waits out the claim before it does
// anything else, so it never asks for the name, or leaves, while a release
// may be handing it the name.
//
// A Slot's fields are guarded by the mutex of the line it stands in: Claim
// runs with it held, and the other methods take it themselves.
package handoff
