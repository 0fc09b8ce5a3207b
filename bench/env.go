package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/isolate"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

// env is one database's isolated schema (PostgreSQL) or database (MySQL),
// migrated, with a pool on it. Every scenario of one database runs in it.
type env struct {
	kind    store.Kind
	label   string // "PostgreSQL", "MariaDB", "MySQL"
	version string // the server's version string
	schema  string // bench_<random>: the schema or database
	dsn     string // dblock DSN of the isolated schema/database
	pgURL   string // PostgreSQL only: a libpq URL of the isolated schema (for pglock)
	db      *dialect.DB
	admin   *dialect.DB
	// prefix makes lock names unique to this run: GET_LOCK names are
	// server-wide and advisory locks database-wide.
	prefix string
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// openEnv creates bench_<random> on the server at serverDSN, migrates it and
// opens a pool on it.
func openEnv(ctx context.Context, kind store.Kind, serverDSN string) (*env, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	adm, err := dialect.Open(ctx, serverDSN)
	if err != nil {
		return nil, err
	}
	e := &env{kind: kind, admin: adm, schema: "bench_" + randomHex(4), prefix: randomHex(4)}
	if err := adm.SQL().QueryRowContext(ctx, "SELECT version()").Scan(&e.version); err != nil {
		_ = adm.Close()
		return nil, fmt.Errorf("read server version: %w", err)
	}
	switch kind {
	case store.Postgres:
		e.label = "PostgreSQL"
		if _, err := adm.SQL().ExecContext(ctx, "CREATE SCHEMA "+e.schema); err != nil {
			_ = adm.Close()
			return nil, fmt.Errorf("create schema: %w", err)
		}
		u, err := url.Parse(serverDSN)
		if err != nil {
			_ = e.drop()
			return nil, err
		}
		q := u.Query()
		q.Set("search_path", e.schema)
		u.RawQuery = q.Encode()
		e.dsn, e.pgURL = u.String(), u.String()
	case store.MySQL:
		e.label = "MySQL"
		if strings.Contains(strings.ToLower(e.version), "mariadb") {
			e.label = "MariaDB"
		}
		if _, err := adm.SQL().ExecContext(ctx, "CREATE DATABASE "+e.schema); err != nil {
			_ = adm.Close()
			return nil, fmt.Errorf("create database: %w", err)
		}
		e.dsn = isolate.MySQLWithDB(serverDSN, e.schema)
	default:
		_ = adm.Close()
		return nil, fmt.Errorf("no benchmarks for %s", kind)
	}
	if e.db, err = dialect.Open(ctx, e.dsn); err != nil {
		_ = e.drop()
		return nil, err
	}
	// Every scenario gets the same pool shape: enough idle connections for
	// 32 goroutines plus a locker's own sessions, so nobody pays reconnects.
	e.db.SQL().SetMaxIdleConns(64)
	if err := migrations.Up(ctx, e.db); err != nil {
		_ = e.drop()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return e, nil
}

// reset empties the lock tables between cells, so no cell inherits another's
// rows or dead tuples.
func (e *env) reset(ctx context.Context, extra ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, t := range append([]string{"dblock_locks", "dblock_waiters"}, extra...) {
		if _, err := e.db.SQL().ExecContext(ctx, "TRUNCATE TABLE "+t); err != nil {
			return fmt.Errorf("truncate %s: %w", t, err)
		}
	}
	return nil
}

// drop removes the schema/database and closes the pools.
func (e *env) drop() error {
	if e.db != nil {
		_ = e.db.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var err error
	switch e.kind {
	case store.Postgres:
		_, err = e.admin.SQL().ExecContext(ctx, "DROP SCHEMA "+e.schema+" CASCADE")
	case store.MySQL:
		_, err = e.admin.SQL().ExecContext(ctx, "DROP DATABASE "+e.schema)
	}
	_ = e.admin.Close()
	return err
}
