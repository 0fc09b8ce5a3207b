// Package store is the seam between dblock's lock packages and the
// databases: every SQL statement, the placeholders, DSN parsing, capability
// flags and the classification of driver errors. It imports no driver: the
// packages under dialect/ register one each (Register), and the front door
// (package dialect) wraps a *DB for users.
//
// The lock packages are its only callers.
package store
