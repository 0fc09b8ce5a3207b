// Package postgres brings PostgreSQL to dblock through pgx: import it (for
// its side effect, or for FromPool) and dialect.Open accepts postgres://,
// postgresql:// and keyword/value (host=... dbname=...) DSNs.
//
//	import _ "github.com/dblock-go/dblock/dialect/postgres"
//
// A program that already has a *pgxpool.Pool hands it to FromPool.
//
// The *sql.DB of a handle from dialect.Open or FromPool holds dblock's
// wrapper of pgx's stdlib connection, so that a pessimistic hold's BEGIN can
// ride with its lock statement: code that reaches the driver connection
// through (*sql.Conn).Raw finds pgx's connection behind the method
// Conn() *pgx.Conn, not a *stdlib.Conn.
package postgres
