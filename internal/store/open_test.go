package store_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// withParam adds key=value to a go-sql-driver DSN.
func withParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// openRawMySQL opens a go-sql-driver pool on dsn (no dblock defaults), closed at cleanup.
func openRawMySQL(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestNewMySQLRefusesFoundRows: a caller's pool that counts matched rows as
// affected (clientFoundRows=true) is refused by New, whether the role may
// create a temporary table for the probe or only update the fence row; a
// pool without it is accepted and its acquisitions exclude each other.
func TestNewMySQLRefusesFoundRows(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	iso := dbtest.New(t, store.MySQL)
	root := strings.TrimPrefix(iso.DSN, "mysql://")

	found := openRawMySQL(t, withParam(root, "clientFoundRows=true&parseTime=true"))
	if _, err := store.New(ctx, found, store.MySQL); !errors.Is(err, dblock.ErrInvalidOption) ||
		!strings.Contains(err.Error(), "clientFoundRows") {
		t.Fatalf("New on a clientFoundRows pool = %v, want ErrInvalidOption naming clientFoundRows", err)
	}

	plain := openRawMySQL(t, withParam(root, "parseTime=true"))
	plain.SetMaxOpenConns(1) // One connection: the probe's temporary table must be gone from it.
	db, err := store.New(ctx, plain, store.MySQL)
	if err != nil {
		t.Fatalf("New on a plain pool: %v", err)
	}
	var one int
	err = plain.QueryRowContext(ctx, "SELECT 1 FROM dblock_probe_changed_rows").Scan(&one)
	if err == nil || !strings.Contains(err.Error(), "1146") {
		t.Fatalf("the probe's temporary table outlived New: %v", err)
	}
	p := store.AcquireParams{Name: "job", Owner: "a", Mode: dblock.ModeOptimistic, TTL: time.Minute}
	if r, err := db.AcquireLease(ctx, nil, p); err != nil || !r.Acquired {
		t.Fatalf("acquire by a: %+v, %v", r, err)
	}
	p.Owner = "b"
	if r, err := db.AcquireLease(ctx, nil, p); err != nil || r.Acquired || r.Holder.Owner != "a" {
		t.Fatalf("acquire by b while a holds: %+v, %v; want not acquired, held by a", r, err)
	}

	// A role without CREATE TEMPORARY TABLES (the README's grants): the
	// probe falls back to the fence row.
	var b [4]byte
	_, _ = rand.Read(b[:])
	user := "dblock_new_" + hex.EncodeToString(b[:])
	var dbName string
	if err := iso.Store().GetContext(ctx, &dbName, "SELECT DATABASE()"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + dbName + ".dblock_locks TO '" + user + "'@'%'",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON " + dbName + ".dblock_fence TO '" + user + "'@'%'",
	} {
		if _, err := iso.Store().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = iso.Store().ExecContext(context.Background(), "DROP USER '"+user+"'@'%'") })
	addr := root[strings.LastIndex(root[:strings.LastIndex(root, "/")], "@")+1:]
	app := user + ":pw@" + addr
	appFound := openRawMySQL(t, withParam(app, "clientFoundRows=true"))
	if _, err := appFound.ExecContext(ctx, "CREATE TEMPORARY TABLE t (id INT)"); err == nil {
		t.Fatal("the test role may create temporary tables; the fallback is not exercised")
	}
	if _, err := store.New(ctx, appFound, store.MySQL); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Fatalf("New on a clientFoundRows pool of a role without temporary tables = %v, want ErrInvalidOption", err)
	}
	if _, err := store.New(ctx, openRawMySQL(t, app), store.MySQL); err != nil {
		t.Fatalf("New on a plain pool of a role without temporary tables: %v", err)
	}
}
