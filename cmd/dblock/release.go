package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

const releaseHelp = `Usage: dblock [--dsn DSN] release --lock NAME --force

Frees the lock NAME whoever holds it: an administrator's way out when a
holder is stuck. The holder is not asked: it learns that its lock is gone
at its next renewal (dblock exec then stops its command and exits 76).
Without --force nothing is done.

A lock held by a pessimistic transaction has no lease to free: it ends with
that transaction. release finds such a hold (with a locking read that never
waits) and says so, freeing nothing: end the transaction, or its session on
the database server (pg_terminate_backend, KILL). On SQLite a pessimistic
hold is the database's write lock, which blocks every name: release then
says that the database is write-locked by a transaction.

Exit status: 0 when the lock was freed and when nobody held it (the output
says which); 75 when a transaction holds it (nothing freed); 64 on bad usage
or without --force.

Flags:
  --lock NAME   the lock to free (required)
  --force       confirm that another owner's lock may be freed (required)

Examples:
  dblock release --lock nightly-report --force
  DBLOCK_DSN='postgres://admin@db:5432/app' dblock release --lock invoice:42 --force
`

// releaseTimeout bounds the release statements.
const releaseTimeout = 30 * time.Second

func (a *app) release(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	name := fs.String("lock", "", "lock name")
	force := fs.Bool("force", false, "confirm")
	if done, err := a.parseFlags(fs, releaseHelp, args); done {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("release: unexpected argument %q (see dblock release --help)", fs.Arg(0))
	}
	if *name == "" {
		return usageErrorf("release: --lock NAME is required (see dblock release --help)")
	}
	if err := dblock.ValidateName(*name); err != nil {
		return withCode(exitUsage, fmt.Errorf("release: %w", err))
	}
	if !*force {
		return usageErrorf("release: refusing to free %q without --force: it may be held by another owner, "+
			"who would lose it (dblock release --lock %s --force)", *name, *name)
	}
	db, err := a.open(ctx, schemaRequired)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	before, err := store.Of(db).LeaseHolder(ctx, nil, *name)
	if err != nil {
		return fmt.Errorf("release %q: %w", *name, a.schemaError(err))
	}
	if err := a.refuseTxHold(ctx, db, *name, before); err != nil {
		return err
	}
	freed, err := store.Of(db).ForceRelease(ctx, nil, *name)
	if err != nil {
		return fmt.Errorf("release %q: %w", *name, a.schemaError(err))
	}
	if !freed {
		fmt.Fprintf(a.stdout, "%q is not held: nothing to release\n", *name)
		return nil
	}
	a.printReleased(*name, before)
	return nil
}

// refuseTxHold refuses to free name while a transaction holds it (a
// pessimistic hold), which only ending that transaction can free. A live
// lease is the hold (pessimistic acquirers wait for it), except on SQLite,
// where a transaction holding the write lock would make the release wait
// and fail: there the probe always runs.
func (a *app) refuseTxHold(ctx context.Context, db *dialect.DB, name string, before store.Holder) error {
	if before.Held() && store.Of(db).Dialect.Caps().RowLocks {
		return nil
	}
	tx, err := store.Of(db).ProbeTxHolds(ctx, []string{name}, 0)
	if err != nil {
		return fmt.Errorf("release %q: probe for a transaction hold: %w", name, a.schemaError(err))
	}
	switch {
	case tx.WriteLocked:
		return withCode(exitNotAcquired, fmt.Errorf("release: cannot free %q: the database is write-locked by a transaction "+
			"(SQLite: a pessimistic hold locks the whole file), which only ending that transaction can free; nothing released", name))
	case tx.Held(name):
		return withCode(exitNotAcquired, fmt.Errorf("release: %q is held by a transaction (pessimistic mode), which only ending "+
			"that transaction or its database session can free; nothing released", name))
	}
	return nil
}

// printReleased says what was freed: the owner and token it was held by
// (and whether its lease had already expired), when it was a lease.
func (a *app) printReleased(name string, before store.Holder) {
	if before.Owner == "" {
		fmt.Fprintf(a.stdout, "released %q\n", name)
		return
	}
	state := ""
	if !before.ExpiresAt.IsZero() && !before.ExpiresAt.After(before.Now) {
		state = ", lease already expired"
	}
	fmt.Fprintf(a.stdout, "released %q (was held by owner %q, token %d%s)\n", name, before.Owner, before.Version, state)
}
