// Package migrations holds dblock's goose SQL migrations, one directory per
// dialect, embedded for programmatic use. They are plain goose files, so the
// goose CLI applies them too:
//
//	goose -dir migrations/postgres -table dblock_db_version postgres "$DSN" up
//
// dblock keeps its own version table (dblock_db_version), so its history never
// mixes with an application's goose_db_version.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
)

// FS holds the migrations: postgres/*.sql, mysql/*.sql, sqlite/*.sql.
//
//go:embed postgres/*.sql mysql/*.sql sqlite/*.sql
var FS embed.FS

// VersionTable is the goose version table dblock uses.
const VersionTable = "dblock_db_version"

// Dir returns the directory of FS holding kind's migrations.
func Dir(kind dialect.Kind) string { return string(kind) }

// NewProvider returns a goose Provider for db's dialect on VersionTable. On
// PostgreSQL concurrent runs are serialised by a session advisory lock.
func NewProvider(db *dialect.DB) (*goose.Provider, error) {
	sub, err := fs.Sub(FS, Dir(db.Dialect.Kind()))
	if err != nil {
		return nil, err
	}
	opts := []goose.ProviderOption{
		goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true),
	}
	var gd goose.Dialect
	switch db.Dialect.Kind() {
	case dialect.Postgres:
		gd = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case dialect.MySQL:
		gd = goose.DialectMySQL
	case dialect.SQLite:
		gd = goose.DialectSQLite3
	default:
		return nil, fmt.Errorf("%w: no migrations for dialect %q", dblock.ErrInvalidOption, db.Dialect.Kind())
	}
	return goose.NewProvider(gd, db.DB.DB, sub, opts...)
}

// Up applies every pending migration.
func Up(ctx context.Context, db *dialect.DB) error {
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	_, err = p.Up(ctx)
	return err
}

// Down rolls back the most recent migration (as `goose down` does).
func Down(ctx context.Context, db *dialect.DB) error {
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	_, err = p.Down(ctx)
	if errors.Is(err, goose.ErrNoNextVersion) {
		return nil
	}
	return err
}

// DownTo rolls back to version (0 removes every dblock table).
func DownTo(ctx context.Context, db *dialect.DB, version int64) error {
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	_, err = p.DownTo(ctx, version)
	return err
}

// Status reports each migration and whether it is applied.
func Status(ctx context.Context, db *dialect.DB) ([]*goose.MigrationStatus, error) {
	p, err := NewProvider(db)
	if err != nil {
		return nil, err
	}
	return p.Status(ctx)
}

// Check returns an error wrapping dblock.ErrSchemaMissing, saying which
// command to run, unless every migration is applied.
func Check(ctx context.Context, db *dialect.DB) error {
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return db.Classify(err)
	}
	if pending {
		return fmt.Errorf("%w: migrations pending: run %s", dblock.ErrSchemaMissing, db.Dialect.MigrateHint())
	}
	return nil
}
