package isolate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// Name returns a fresh name for a schema, database or file: prefix and 12
// random hex digits.
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// DSN creates name on the server admin is connected to (serverDSN, of
// kind), drops it when t ends, and returns the DSN of a database that is
// name: a schema (PostgreSQL; also the sessions' application_name, so a
// test can find its own sessions), a database (MySQL), a file in t's
// temporary directory (SQLite, where admin is nil).
func DSN(t testing.TB, admin *store.DB, kind store.Kind, serverDSN, name string) string {
	t.Helper()
	switch kind {
	case store.Postgres:
		create(t, admin, "CREATE SCHEMA "+name, "DROP SCHEMA "+name+" CASCADE")
		return withQuery(withQuery(serverDSN, "search_path", name), "application_name", name)
	case store.MySQL:
		create(t, admin, "CREATE DATABASE "+name, "DROP DATABASE "+name)
		return MySQLWithDB(serverDSN, name)
	case store.SQLite:
		return "sqlite://" + filepath.Join(t.TempDir(), name+".db")
	}
	t.Fatalf("isolate: unknown kind %q", kind)
	return ""
}

// create runs up on admin, and down when t ends.
func create(t testing.TB, admin *store.DB, up, down string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, up); err != nil {
		t.Fatalf("isolate: %s: %v", up, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, down); err != nil {
			t.Errorf("isolate: %s: %v", down, err)
		}
	})
}

// Open opens dsn for t, closed when t ends.
func Open(t testing.TB, dsn string) *dialect.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := dialect.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("isolate: open %s: %v", store.Redact(dsn), err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func withQuery(dsn, key, value string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// MySQLWithDB replaces the database of a mysql:// DSN.
func MySQLWithDB(dsn, db string) string {
	rest := strings.TrimPrefix(dsn, "mysql://")
	query := ""
	if i := strings.Index(rest, "?"); i >= 0 {
		rest, query = rest[:i], rest[i:]
	}
	if i := strings.LastIndex(rest, "/"); i >= 0 {
		rest = rest[:i]
	}
	return "mysql://" + rest + "/" + db + query
}
