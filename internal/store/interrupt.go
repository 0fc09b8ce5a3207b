package store

import "database/sql"

// Interrupter is a driver connection whose statement in flight can be made
// to fail at once from another goroutine: MariaDB's and MySQL's on a pool
// Open opened, where dblock dialed the socket (dialect/mysql). pgx needs
// none: it ends a statement whose context is cancelled.
type Interrupter interface {
	// Interruptible reports whether Interrupt can end a statement.
	Interruptible() bool
	// Interrupt makes the statement under way fail, and every later one.
	Interrupt()
}

// InterruptOf returns the function that interrupts conn's statements, or
// nil where its driver connection cannot be interrupted so. Call it while
// no statement runs on conn: database/sql holds the connection for one.
func InterruptOf(conn *sql.Conn) func() {
	var f func()
	_ = conn.Raw(func(dc any) error {
		if i, ok := dc.(Interrupter); ok && i.Interruptible() {
			f = i.Interrupt
		}
		return nil
	})
	return f
}
