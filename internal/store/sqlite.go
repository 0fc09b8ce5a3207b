package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/dblock-go/dblock"
)

// sqliteDialect is the embedded default: one file, one writer at a time. Locks
// are exclusive between the processes of one host that share the file. There
// are no row locks: a pessimistic lock is a write transaction on the whole
// database (BEGIN IMMEDIATE), so it also makes every other writer wait.
type sqliteDialect struct {
	file string // The database file, when known (Open), for MigrateHint.
}

var sqliteDialectV Dialect = sqliteDialect{}

// SQLiteDialect returns the SQLite dialect.
func SQLiteDialect() Dialect { return sqliteDialectV }

func (sqliteDialect) Kind() Kind { return SQLite }

func (sqliteDialect) Caps() Caps { return Caps{Returning: true, LockWaitResumes: true} }

func (sqliteDialect) Placeholder(n int) string { return fmt.Sprintf("?%d", n) }

// Now is the database clock in integer microseconds since the Unix epoch.
func (sqliteDialect) Now() string { return sqliteNow }

func (sqliteDialect) IdentQuote() string { return `"` }

const sqliteNow = "CAST(unixepoch('subsec') * 1000000 AS INTEGER)"

// MigrateHint names the database file when the dialect came from Open.
func (d sqliteDialect) MigrateHint() string {
	file := "path/to/file.db"
	if d.file != "" {
		file = shellQuote(d.file)
	}
	return `dblock migrate up (or: goose -dir migrations/sqlite -table dblock_db_version sqlite3 ` + file + ` up)`
}

// shellQuote returns s as one shell word.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_./-+:=,@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// attach keeps the database file of an Open for MigrateHint.
func (sqliteDialect) attach(_ context.Context, _ *sql.DB, a attachment) (Dialect, error) {
	file, _, _ := strings.Cut(a.dsn, "?")
	return sqliteDialect{file: file}, nil
}

func (sqliteDialect) Lease() *LeaseSQL { return &sqliteLease }
func (sqliteDialect) Row() *RowSQL     { return &sqliteRow }
func (sqliteDialect) Queue() *QueueSQL { return &sqliteQueue }
func (sqliteDialect) Reap() *ReapSQL   { return &sqliteReap }

func (sqliteDialect) History() *HistorySQL       { return &sqliteHistory }
func (sqliteDialect) Shared() *SharedSQL         { return &sqliteShared }
func (sqliteDialect) Semaphore() *SemaphoreSQL   { return &sqliteSemaphore }
func (sqliteDialect) SharedReap() *SharedReapSQL { return &sqliteSharedReap }
func (sqliteDialect) Slots() *SlotSQL            { return &sqliteSlots }

// Classify maps SQLite result codes:
//
//	SQLITE_BUSY_SNAPSHOT: a deferred transaction read an older
//	snapshot than the one it now wants to write on (WAL)        -> ErrSerialization
//	SQLITE_BUSY, SQLITE_LOCKED: another writer holds the
//	database past the busy timeout                              -> ErrNotAcquired
//	"no such table", "no such column", "has no column named"    -> ErrSchemaMissing
//
// SQLite reports a missing table or column only as a generic SQLITE_ERROR,
// so those cases are recognised by their message. SQLite has no deadlock error: in WAL
// mode readers never block writers and there is one writer, so two
// transactions cannot wait on each other; the closest case, two deferred
// transactions that both read and then both write, fails the second writer
// with SQLITE_BUSY_SNAPSHOT once the first commits (retry the whole
// transaction). With a rollback journal SQLite breaks the same cycle by
// returning a plain SQLITE_BUSY at once, which no code tells from a busy
// timeout. dblock's own transactions begin IMMEDIATE and meet neither.
func (d sqliteDialect) Classify(err error) error {
	if err == nil {
		return nil
	}
	if se, ok := serverError(SQLite, err); ok {
		if se.Code == sqliteBusySnapshot {
			return fmt.Errorf("%w: %w", dblock.ErrSerialization, err)
		}
		switch se.Code & 0xff {
		case sqliteBusy, sqliteLocked:
			return notAcquired(err)
		case sqliteError:
			if m := se.Message; strings.Contains(m, "no such table") || strings.Contains(m, "no such column") || strings.Contains(m, "has no column named") {
				return schemaMissing(d, err)
			}
		}
	}
	return err
}

// SQLite's result codes (sqlite3.h), which are part of its stable C API.
const (
	sqliteError        = 1   // SQLITE_ERROR
	sqliteBusy         = 5   // SQLITE_BUSY
	sqliteLocked       = 6   // SQLITE_LOCKED
	sqliteBusySnapshot = 517 // SQLITE_BUSY_SNAPSHOT: SQLITE_BUSY | 2<<8
)
