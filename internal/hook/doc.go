// Package hook carries the root package's internals to the lock packages
// without an import cycle and without exporting them to users: the root
// package (dblock) assigns these variables in its init, and internal/mode
// wraps them with dblock's types. Nothing else should use this package.
//
// It imports nothing of the module, so the root package can import it.
package hook
