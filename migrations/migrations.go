package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// FS holds the migrations: postgres/*.sql, mysql/*.sql, sqlite/*.sql.
//
//go:embed postgres/*.sql mysql/*.sql sqlite/*.sql
var FS embed.FS

// VersionTable is the goose version table dblock uses.
const VersionTable = "dblock_db_version"

// Dir returns the directory of FS holding kind's migrations.
func Dir(kind dialect.Kind) string { return string(kind) }

// LockID is the PostgreSQL advisory lock that serialises dblock's migration
// runs: crc32("dblock"), so they never queue behind (or block) an
// application's own goose runs, which use goose's default lock id.
const LockID int64 = 0x679e8cd0

// Lock retries: goose's defaults retry every 5 s, which makes the second of
// two concurrent runs wait 5 s for a lock the first holds for milliseconds.
// goose's shortest period is 1 s; 300 tries keep its 5-minute bound.
const (
	lockRetryPeriod   = 1   // seconds
	lockRetries       = 300 // tries
	unlockRetryPeriod = 1
	unlockRetries     = 60
)

// gooseDialect maps a dblock dialect to goose's.
func gooseDialect(kind store.Kind) (goose.Dialect, error) {
	switch kind {
	case store.Postgres:
		return goose.DialectPostgres, nil
	case store.MySQL:
		return goose.DialectMySQL, nil
	case store.SQLite:
		return goose.DialectSQLite3, nil
	}
	return "", fmt.Errorf("%w: no migrations for dialect %q", dblock.ErrInvalidOption, kind)
}

// NewProvider returns a goose Provider for db's dialect on VersionTable. On
// PostgreSQL concurrent runs are serialised by a session advisory lock
// (LockID), tried every second. Up, Down, DownTo and Status also serialise
// runs on MySQL/MariaDB (a named lock) and SQLite (retries); a Provider used
// directly does not.
func NewProvider(handle *dialect.DB) (*goose.Provider, error) {
	return newProvider(store.Of(handle))
}

// newProvider is NewProvider on the store.
func newProvider(db *store.DB) (*goose.Provider, error) {
	gd, err := gooseDialect(db.Dialect.Kind())
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(FS, string(db.Dialect.Kind()))
	if err != nil {
		return nil, err
	}
	opts := []goose.ProviderOption{
		goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true),
	}
	if db.Dialect.Kind() == store.Postgres {
		locker, err := lock.NewPostgresSessionLocker(
			lock.WithLockID(LockID),
			lock.WithLockTimeout(lockRetryPeriod, lockRetries),
			lock.WithUnlockTimeout(unlockRetryPeriod, unlockRetries),
		)
		if err != nil {
			return nil, err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	return goose.NewProvider(gd, db.DB.DB, sub, opts...)
}

// Up applies every pending migration. Concurrent runs on one database (say,
// replicas that migrate as they start) are serialised: each ends with every
// migration applied, or an error.
func Up(ctx context.Context, handle *dialect.DB) error {
	db := store.Of(handle)
	_, err := upResults(ctx, db)
	return err
}

// UpResults is Up, returning the migrations this call applied (none when a
// concurrent run applied them first).
func UpResults(ctx context.Context, handle *dialect.DB) ([]*goose.MigrationResult, error) {
	return upResults(ctx, store.Of(handle))
}

// upResults is UpResults on the store.
func upResults(ctx context.Context, db *store.DB) ([]*goose.MigrationResult, error) {
	var applied []*goose.MigrationResult
	err := run(ctx, db, func(p *goose.Provider) error {
		res, err := p.Up(ctx)
		for _, r := range res {
			if r.Error == nil {
				applied = append(applied, r)
			}
		}
		return err
	})
	return applied, err
}

// Down rolls back the most recent migration (as `goose down` does).
func Down(ctx context.Context, handle *dialect.DB) error {
	db := store.Of(handle)
	return run(ctx, db, func(p *goose.Provider) error {
		_, err := p.Down(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			return nil
		}
		return err
	})
}

// DownTo rolls back to version (0 removes every dblock table).
func DownTo(ctx context.Context, handle *dialect.DB, version int64) error {
	db := store.Of(handle)
	return run(ctx, db, func(p *goose.Provider) error {
		_, err := p.DownTo(ctx, version)
		return err
	})
}

// sqliteRetries bounds the runs retried on SQLite (see run).
const sqliteRetries = 10

// run runs fn on a new Provider, on MySQL/MariaDB under the migration lock
// (lockRun). On SQLite a run that fails is run again
// (with a fresh Provider, which reads the applied versions anew), a few
// times with a growing pause: SQLite has no lock goose can hold across a
// run, so two processes migrating one fresh file both see version 0 and
// one of them fails on a table the other just created (or on the busy
// database). Each migration runs in a transaction, so a failed run leaves
// nothing half done, and the second run finds the work done. A real error
// fails every try and is returned.
func run(ctx context.Context, db *store.DB, fn func(p *goose.Provider) error) error {
	unlock, err := lockRun(ctx, db)
	if err != nil {
		return err
	}
	defer unlock()
	pause := 20 * time.Millisecond
	for try := 1; ; try++ {
		p, err := newProvider(db)
		if err != nil {
			return err
		}
		err = fn(p)
		if err == nil || db.Dialect.Kind() != store.SQLite || try == sqliteRetries || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		pause = min(2*pause, time.Second)
	}
}

// Status reports each migration and whether it is applied.
func Status(ctx context.Context, handle *dialect.DB) ([]*goose.MigrationStatus, error) {
	return status(ctx, store.Of(handle))
}

// status is Status on the store.
func status(ctx context.Context, db *store.DB) ([]*goose.MigrationStatus, error) {
	var st []*goose.MigrationStatus
	err := run(ctx, db, func(p *goose.Provider) error {
		var err error
		st, err = p.Status(ctx)
		return err
	})
	return st, err
}

// Check returns an error wrapping dblock.ErrSchemaMissing, saying which
// command to run, unless every migration is applied. It only reads: unlike
// goose's Provider, it never creates the version table.
//
// A role that may not read the version table (the least-privilege grants of
// an application that does not migrate) cannot see which migrations are
// applied. Check then probes the dblock tables instead (zero-row reads of every column the lock statements use, and the source of
// fencing tokens) and returns nil when they are all there and readable; a
// migration that adds only an index goes unseen there. A missing table is
// still ErrSchemaMissing; a missing privilege on the tables themselves is
// the server's permission error (SQLSTATE 42501; MySQL 1142, 1143, 1044).
func Check(ctx context.Context, handle *dialect.DB) error {
	db := store.Of(handle)
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	gd, err := gooseDialect(db.Dialect.Kind())
	if err != nil {
		return err
	}
	gstore, err := database.NewStore(gd, VersionTable)
	if err != nil {
		return err
	}
	rows, err := gstore.ListMigrations(ctx, db.DB.DB)
	if err != nil {
		if store.PermissionDenied(err) {
			return db.ProbeSchema(ctx)
		}
		return db.Classify(err)
	}
	// Rows come newest first; a version's newest row says whether it is
	// applied (goose records a down as a row with is_applied false).
	applied := map[int64]bool{}
	for _, r := range rows {
		if _, seen := applied[r.Version]; !seen {
			applied[r.Version] = r.IsApplied
		}
	}
	var pending []string
	for _, src := range p.ListSources() {
		if !applied[src.Version] {
			pending = append(pending, fmt.Sprint(src.Version))
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("%w: migrations pending (%s): run %s", dblock.ErrSchemaMissing,
			strings.Join(pending, ", "), db.Dialect.MigrateHint())
	}
	return nil
}
