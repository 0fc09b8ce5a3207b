// Package postgres brings PostgreSQL to dblock through pgx: import it (for
// its side effect, or for FromPool) and dialect.Open accepts postgres://,
// postgresql:// and keyword/value (host=... dbname=...) DSNs.
//
//	import _ "github.com/dblock-go/dblock/dialect/postgres"
//
// A program that already has a *pgxpool.Pool hands it to FromPool.
package postgres
