package store

// The front door (package dialect) wraps a *DB in its own *dialect.DB, which
// the lock packages take. Importing dialect here would be a cycle, so
// dialect's init hands the store two functions: wrap, for the database
// packages (dialect/postgres's FromPool) that build a handle themselves, and
// unwrap, for the lock packages (Of).
var (
	wrap   func(*DB) any
	unwrap func(any) *DB
)

// SetFront is called once, by package dialect's init.
func SetFront(w func(*DB) any, u func(any) *DB) { wrap, unwrap = w, u }

// Of returns the store behind a *dialect.DB (nil for a nil handle).
func Of(h any) *DB {
	if unwrap == nil {
		return nil
	}
	return unwrap(h)
}

// Front wraps s in a *dialect.DB (as an any; the caller asserts the type).
func Front(s *DB) any { return wrap(s) }
