package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"

	"github.com/dblock-go/dblock"
)

type postgres struct{ server }

var postgresDialect Dialect = postgres{}

// PostgresDialect returns the PostgreSQL dialect.
func PostgresDialect() Dialect { return postgresDialect }

func (postgres) Kind() Kind { return Postgres }

func (postgres) Caps() Caps {
	return Caps{Notify: true, SkipLocked: true, NoWait: true, RowLocks: true, Returning: true,
		AsyncCommit: true, StatementLockTimeout: true, IdleTxTimeout: true,
		ErrorAbortsTx: true, TxEndCancellable: true}
}

func (postgres) Placeholder(n int) string { return "$" + strconv.Itoa(n) }
func (postgres) Now() string              { return "now()" }
func (postgres) IdentQuote() string       { return `"` }

func (postgres) MigrateHint() string {
	return `dblock migrate up (or: goose -dir migrations/postgres -table dblock_db_version postgres "$DSN" up)`
}

func (d postgres) attach(context.Context, *sql.DB, attachment) (Dialect, error) { return d, nil }

func (postgres) Lease() *LeaseSQL { return &pgLease }
func (postgres) Row() *RowSQL     { return &pgRow }
func (postgres) Queue() *QueueSQL { return &pgQueue }
func (postgres) Reap() *ReapSQL   { return &pgReap }

func (postgres) History() *HistorySQL       { return &pgHistory }
func (postgres) Shared() *SharedSQL         { return &pgShared }
func (postgres) Semaphore() *SemaphoreSQL   { return &pgSemaphore }
func (postgres) SharedReap() *SharedReapSQL { return &pgSharedReap }
func (postgres) Slots() *SlotSQL            { return &pgSlots }

// Classify maps PostgreSQL SQLSTATEs:
//
//	55P03 lock_not_available (NOWAIT, lock_timeout)        -> ErrNotAcquired
//	40P01 deadlock_detected                                 -> ErrDeadlock
//	40001 serialization_failure                             -> ErrSerialization
//	42P01 undefined_table, 42703 undefined_column,
//	42883 undefined_function, 3F000 invalid_schema_name     -> ErrSchemaMissing
//	25P03 idle_in_transaction_session_timeout               -> ErrConnLost
//	57P01-57P03 shutdown/terminated, 08xxx connection,
//	53xxx insufficient resources (53300 too many clients)   -> ErrUnavailable
//	connection reset, closed or cut mid-answer              -> ErrUnavailable
func (d postgres) Classify(err error) error {
	if err == nil {
		return nil
	}
	if code, ok := pgState(err); ok {
		switch {
		case code == "55P03":
			return notAcquired(err)
		case code == "40P01":
			return fmt.Errorf("%w: %w", dblock.ErrDeadlock, err)
		case code == "40001":
			return fmt.Errorf("%w: %w", dblock.ErrSerialization, err)
		case code == "42P01" || code == "42703" || code == "42883" || code == "3F000":
			return schemaMissing(d, err)
		case code == "25P03":
			return fmt.Errorf("%w: %w", dblock.ErrConnLost, err)
		case code == "57P01" || code == "57P02" || code == "57P03" || len(code) == 5 && (code[:2] == "08" || code[:2] == "53"):
			return fmt.Errorf("%w: %w", dblock.ErrUnavailable, err)
		}
		return err
	}
	if drivers[Postgres].ConnLost(err) || connectionLost(err) {
		return unavailable(err)
	}
	return err
}
