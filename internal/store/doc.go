// Package store is the seam between dblock's lock packages and the
// databases: every SQL statement, the code that binds and reads it, the
// placeholders, DSN parsing, capability flags and the classification of
// driver errors. It imports no driver: the packages under dialect/ register
// one each (Register), and the front door (package dialect) wraps a *DB for
// users.
//
// Each database is an engine (see engine.go), the implementation of
// Dialect for it, with its files named after it: postgres*.go, mysql*.go
// (MySQL 8 and MariaDB, told apart by the engine's flavour, never by the
// caller), sqlite*.go; server*.go holds what PostgreSQL and MySQL do alike.
// In each, *_sql.go holds the statements written out, and *_<concern>.go
// the code that runs them. The files without a prefix (lease.go, row.go,
// queue.go, reap.go, session.go, token.go, txend.go, probe.go, admin.go,
// userrows.go, schema.go) hold the exported DB methods, which the lock
// packages call, and the concern's engine interface; a DB method never
// switches on the database: it runs what every database runs alike, and
// asks the engine for the rest. baseDialect is the one place where a kind
// picks its engine.
//
// The lock packages are its only callers.
package store
