package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

// openTimeout bounds connecting and the schema check.
const openTimeout = 15 * time.Second

// schema says what open does about the dblock tables.
type schema int

const (
	// schemaAny opens without looking at the tables (migrate).
	schemaAny schema = iota
	// schemaRequired checks that every migration is applied, migrating the
	// built-in SQLite default automatically.
	schemaRequired
)

// open connects to the invocation's DSN. A malformed DSN exits 64, an
// unreachable database 69, missing tables 78 with the command to run.
func (a *app) open(ctx context.Context, s schema) (*dialect.DB, error) {
	if _, _, err := store.ParseDSN(a.dsn); err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("bad DSN: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	db, err := dialect.Open(ctx, a.dsn)
	if err != nil {
		if errors.Is(err, dblock.ErrInvalidOption) {
			return nil, withCode(exitUsage, fmt.Errorf("bad DSN: %w", err))
		}
		if !errors.Is(err, dblock.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", dblock.ErrUnavailable, err)
		}
		return nil, err
	}
	if s == schemaRequired {
		if err := a.checkSchema(ctx, db); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	return db, nil
}

// checkSchema returns nil when every migration is applied. The built-in
// SQLite default is migrated on first use, so the first command on a fresh
// machine works with no server and no setup; every other database is left
// alone and the error says which command to run.
func (a *app) checkSchema(ctx context.Context, db *dialect.DB) error {
	err := migrations.Check(ctx, db)
	if err == nil || !errors.Is(err, dblock.ErrSchemaMissing) {
		return a.schemaError(err)
	}
	if !a.dsnDefault || store.Of(db).Dialect.Kind() != store.SQLite {
		return a.schemaError(err)
	}
	if upErr := migrations.Up(ctx, db); upErr != nil {
		// Two first commands may race to create the tables; whichever lost
		// finds them created by the other.
		if err := migrations.Check(ctx, db); err != nil {
			return fmt.Errorf("migrate the default SQLite database %s: %w", defaultDSN, upErr)
		}
	}
	return nil
}

// schemaError rewrites a missing-schema error so that it names the command to
// run with this invocation's DSN source.
func (a *app) schemaError(err error) error {
	if err == nil || !errors.Is(err, dblock.ErrSchemaMissing) {
		return err
	}
	return fmt.Errorf("%w: the dblock tables are missing or not up to date in %s: run %s",
		dblock.ErrSchemaMissing, store.Redact(a.dsn), a.migrateCommand())
}

// migrateCommand is the command that applies the migrations to the
// invocation's database.
func (a *app) migrateCommand() string {
	if a.dsnDefault {
		return `"dblock migrate up"`
	}
	return `"dblock migrate up" with the same --dsn or DBLOCK_DSN`
}
