package main

import (
	"context"
	"flag"
	"fmt"
	"path"
	"text/tabwriter"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/migrations"
)

const migrateHelp = `Usage: dblock [--dsn DSN] migrate up|down|status

Applies dblock's embedded migrations for the DSN's database (PostgreSQL,
MySQL/MariaDB or SQLite), recording them in the table dblock_db_version so
they never mix with an application's own goose history.

  up      apply every pending migration
  down    roll back the most recent migration (one step, like goose down)
  status  list the migrations and whether each is applied

The same files work with the goose CLI:
  goose -dir migrations/postgres -table dblock_db_version postgres "$DSN" up

Examples:
  dblock --dsn 'postgres://app@db:5432/app?sslmode=disable' migrate up
  DBLOCK_DSN='mysql://root@tcp(127.0.0.1:3306)/app' dblock migrate status
  dblock migrate down
`

// migrateTimeout bounds a whole migrate command.
const migrateTimeout = 5 * time.Minute

func (a *app) migrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	if done, err := a.parseFlags(fs, migrateHelp, args); done {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("migrate: want exactly one of up, down or status (see dblock migrate --help)")
	}
	sub := fs.Arg(0)
	switch sub {
	case "up", "down", "status":
	default:
		return usageErrorf("migrate: unknown subcommand %q: want up, down or status (see dblock migrate --help)", sub)
	}
	db, err := a.open(ctx, schemaAny)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	switch sub {
	case "up":
		return a.migrateUp(ctx, db)
	case "down":
		return a.migrateDown(ctx, db)
	case "status":
		st, err := migrations.Status(ctx, db)
		if err != nil {
			return fmt.Errorf("migrate status: %w", store.Of(db).Classify(err))
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tFILE")
		for _, s := range st {
			applied := "-"
			if s.State == goose.StateApplied {
				applied = s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.State, applied, path.Base(s.Source.Path))
		}
		return tw.Flush()
	}
	return nil
}

// migrateUp applies the pending migrations through migrations.UpResults
// (which serialises concurrent runs) and names the ones this run applied.
func (a *app) migrateUp(ctx context.Context, db *dialect.DB) error {
	res, err := migrations.UpResults(ctx, db)
	for _, r := range res {
		fmt.Fprintf(a.stdout, "applied %s\n", path.Base(r.Source.Path))
	}
	if err != nil {
		return fmt.Errorf("migrate up: %w", store.Of(db).Classify(err))
	}
	st, err := migrations.Status(ctx, db)
	if err != nil {
		return fmt.Errorf("migrate up: %w", store.Of(db).Classify(err))
	}
	var v int64
	for _, s := range st {
		if s.State == goose.StateApplied {
			v = max(v, s.Source.Version)
		}
	}
	if len(res) == 0 {
		fmt.Fprintf(a.stdout, "up to date at version %d\n", v)
	} else {
		fmt.Fprintf(a.stdout, "migrated to version %d\n", v)
	}
	return nil
}

// migrateDown rolls back the newest applied migration and names it.
func (a *app) migrateDown(ctx context.Context, db *dialect.DB) error {
	before, err := migrations.Status(ctx, db)
	if err != nil {
		return fmt.Errorf("migrate down: %w", store.Of(db).Classify(err))
	}
	var newest *goose.MigrationStatus
	for _, s := range before {
		if s.State == goose.StateApplied {
			newest = s
		}
	}
	if newest == nil {
		fmt.Fprintln(a.stdout, "nothing to roll back: no migration is applied")
		return nil
	}
	if err := migrations.Down(ctx, db); err != nil {
		return fmt.Errorf("migrate down: %w", store.Of(db).Classify(err))
	}
	fmt.Fprintf(a.stdout, "rolled back %s\n", path.Base(newest.Source.Path))
	return nil
}
