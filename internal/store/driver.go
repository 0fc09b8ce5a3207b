package store

import (
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/dblock-go/dblock"
)

// Driver is what one database's Go driver brings to the store: opening a
// pool and reading the driver's own error types. Each database's package
// under dialect/ (dialect/postgres, dialect/mysql, dialect/sqlite) fills one
// in and registers it in its init, so a program links only the drivers it
// imports; nothing else in the module imports a driver.
type Driver struct {
	// Kind is the database family the driver serves.
	Kind Kind
	// Name is the driver's database/sql name ("pgx", "mysql", "sqlite").
	Name string
	// Open opens a pool from the driver's own DSN (a dblock DSN without
	// its scheme), setting what dblock needs.
	Open func(dsn string) (*sql.DB, error)
	// ServerError returns the server's error carried by err, if any.
	ServerError func(err error) (ServerError, bool)
	// ConnLost reports driver errors that mean the connection is gone
	// (beyond the generic ones connectionLost knows).
	ConnLost func(err error) bool
	// NotSent reports driver errors that mean a connection could not be
	// made at all (beyond a refused dial). Optional.
	NotSent func(err error) bool
	// CommitRolledBack reports a COMMIT answered by a rollback. Optional.
	CommitRolledBack func(err error) bool
	// CheckedCommit: the pools Open opens send MariaDBCheckedCommit in
	// place of COMMIT for a transaction begun with a context from
	// WithCheckedCommit (see DB.ChecksCommit).
	CheckedCommit bool
	// DeferredBegin: the pools Open opens send the BEGIN of a transaction
	// begun with a context from WithDeferredBegin with its first statement
	// (see DB.DefersBegin).
	DeferredBegin bool
	// Unwatched: the connections of the pools Open opens restore the
	// caller's context of an Unwatched one before they use it (see
	// unwatched.go).
	Unwatched bool
	// Listen runs LISTEN channel on conn; Wait waits there for the next
	// notification's payload. Both only where the database has
	// notifications.
	Listen func(ctx context.Context, conn *sql.Conn, channel string) error
	Wait   func(ctx context.Context, conn *sql.Conn) (string, error)
	// SetLog sends the driver's own log lines to w. Optional.
	SetLog func(w io.Writer)
	// Native returns, for a pool of this driver, the functions that run one
	// statement on a pooled connection through the driver's own interface,
	// bypassing database/sql's per-statement work; nil for a pool of
	// another driver (a caller's). Optional.
	Native func(pool *sql.DB) *Native
}

// Native runs one statement on a connection of the pool through the
// driver's own interface (see Driver.Native). Errors are the driver's,
// unclassified; a missing row is sql.ErrNoRows.
type Native struct {
	// QueryRow scans the first row of query's result into dest.
	QueryRow func(ctx context.Context, query string, args []any, dest ...any) error
	// Exec runs query and returns the rows it affected.
	Exec func(ctx context.Context, query string, args ...any) (int64, error)
	// QueryRowOn and ExecOn are QueryRow and Exec on conn, a connection of
	// the pool the caller has pinned (inside the transaction it may have
	// begun there), without retries. Optional.
	QueryRowOn func(ctx context.Context, conn *sql.Conn, query string, args []any, dest ...any) error
	ExecOn     func(ctx context.Context, conn *sql.Conn, query string, args ...any) (int64, error)
	// DiscardedSession returns the server's id of conn's session, as the
	// driver learned it when it connected, and the client's TCP port, when
	// the driver has closed conn (a statement cut off in flight); false
	// otherwise, or when conn is not a TCP connection. Optional.
	DiscardedSession func(conn *sql.Conn) (CutOffSession, bool)
}

// ServerError is an error the database server sent, as the driver reports
// it: PostgreSQL's SQLSTATE in State; MySQL's error number or SQLite's
// extended result code in Code; the server's message.
type ServerError struct {
	State   string
	Code    int
	Message string
}

// drivers are the registered drivers, by kind. They are written only by
// Register, from the inits of the dialect/ packages, before main runs.
var drivers = map[Kind]*Driver{}

// Register makes a database's driver available to Open and New. It panics
// when called twice for one kind or with missing parts, as database/sql's
// Register does: both are programming errors found at start-up.
func Register(d *Driver) {
	if d == nil || d.Open == nil || d.ServerError == nil || d.ConnLost == nil || d.Name == "" {
		panic("store: Register: incomplete driver")
	}
	if _, dup := drivers[d.Kind]; dup {
		panic("store: Register called twice for " + string(d.Kind))
	}
	drivers[d.Kind] = d
}

// driverFor returns the registered driver of kind, or an error that says
// which package to import.
func driverFor(kind Kind) (*Driver, error) {
	if d, ok := drivers[kind]; ok {
		return d, nil
	}
	switch kind {
	case Postgres, MySQL, SQLite:
		return nil, fmt.Errorf("%w: no %s driver in this program: import _ \"github.com/dblock-go/dblock/dialect/%s\"",
			dblock.ErrInvalidOption, kind, kind)
	}
	return nil, fmt.Errorf("%w: unknown dialect %q (want postgres, mysql or sqlite)", dblock.ErrInvalidOption, kind)
}

// serverError returns the server error in err, asking each registered
// driver (each recognises only its own error type).
func serverError(kind Kind, err error) (ServerError, bool) {
	if err == nil {
		return ServerError{}, false
	}
	if d, ok := drivers[kind]; ok {
		return d.ServerError(err)
	}
	return ServerError{}, false
}

// pgState returns the SQLSTATE of a PostgreSQL server error in err.
func pgState(err error) (string, bool) {
	se, ok := serverError(Postgres, err)
	return se.State, ok
}

// mysqlCode returns the error number of a MySQL server error in err.
func mysqlCode(err error) (int, bool) {
	se, ok := serverError(MySQL, err)
	return se.Code, ok
}

// mysqlError reports whether err is the MySQL server error number code.
func mysqlError(err error, code int) bool {
	n, ok := mysqlCode(err)
	return ok && n == code
}

// driverSays asks each registered driver's predicate (picked by pick).
func driverSays(err error, pick func(*Driver) func(error) bool) bool {
	if err == nil {
		return false
	}
	for _, d := range drivers {
		if f := pick(d); f != nil && f(err) {
			return true
		}
	}
	return false
}
