package dblocktest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/isolate"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

// Server returns a database of t's own on the PostgreSQL or MySQL server
// of dsn (a dblock DSN whose user may create schemas, or databases): a
// schema (PostgreSQL) or database (MySQL) created for t, migrated, and
// dropped when t ends, and the DSN that opens it from another process.
// Import the database's dialect package (dialect/postgres, dialect/mysql)
// in the test, as for dialect.Open.
func Server(t testing.TB, dsn string) (db *dialect.DB, isolatedDSN string) {
	t.Helper()
	kind, _, err := store.ParseDSN(dsn)
	if err != nil || kind == store.SQLite {
		t.Fatalf("dblocktest: Server wants a postgres:// or mysql:// DSN: %v", err)
	}
	admin := isolate.Open(t, dsn)
	isolatedDSN = isolate.DSN(t, store.Of(admin), kind, dsn, isolate.Name("dblt_"))
	db = isolate.Open(t, isolatedDSN)
	migrate(t, db)
	return db, isolatedDSN
}

// FromEnv is Server on the DSN in the environment variable env; when env
// is empty, t is skipped with a message naming it.
func FromEnv(t testing.TB, env string) *dialect.DB {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		t.Skipf("dblocktest: %s is not set: no database server to test against", env)
	}
	db, _ := Server(t, dsn)
	return db
}

// migrate applies dblock's migrations to db.
func migrate(t testing.TB, db *dialect.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("dblocktest: migrate: %v", err)
	}
}

// Open opens dsn for t (another client of a database from Server), closed
// when t ends.
func Open(t testing.TB, dsn string) *dialect.DB {
	t.Helper()
	return isolate.Open(t, dsn)
}
