package store

// engine is one database's half of the store: the code that binds the
// arguments of that database's statements and reads their answers, where
// the databases differ by more than the text. Each DB method that differs
// by database asks db.Dialect (whose three implementations, postgres,
// mysqlDialect and sqliteDialect, are the engines) instead of switching on
// the kind. The methods live beside their statements, one file per
// database and concern: postgres_*.go, mysql_*.go, sqlite_*.go, and
// server_*.go for what PostgreSQL and MySQL do alike (the server type,
// embedded in both).
//
// The interface is the union of one interface per concern, declared in the
// file of that concern's DB methods.
type engine interface {
	leaseEngine
	tokenEngine
	holdEngine
	rowEngine
	sessionEngine
	userRowsEngine
	adminEngine
	probeEngine
	reapEngine
	queueEngine
	schemaEngine
}
