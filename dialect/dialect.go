package dialect

import (
	"context"
	"database/sql"

	"github.com/dblock-go/dblock/internal/store"
)

// Kind names a database family.
type Kind string

// The supported kinds. MySQL covers MariaDB, told apart by the server's
// version when the database is opened.
const (
	Postgres Kind = "postgres"
	MySQL    Kind = "mysql"
	SQLite   Kind = "sqlite"
)

// DB is a database opened for dblock: a connection pool and what dblock
// learned of the server. It is safe for concurrent use.
type DB struct {
	s *store.DB
}

func init() {
	store.SetFront(
		func(s *store.DB) any { return &DB{s: s} },
		func(h any) *store.DB {
			if db, ok := h.(*DB); ok && db != nil {
				return db.s
			}
			return nil
		})
}

// Open connects to dsn. The scheme picks the database, whose package must be
// imported (dialect/postgres, dialect/mysql, dialect/sqlite):
//
//	postgres://user@host:5432/db?sslmode=disable   (also postgresql://, or host=... dbname=...)
//	mysql://user:pass@tcp(host:3306)/db            (the rest is a go-sql-driver DSN)
//	sqlite://path/to/file.db  or  file:path/to/file.db
//
// Open sets what dblock needs (parseTime and UTC for MySQL; WAL, a busy
// timeout and immediate transactions for SQLite; server-side TCP keepalives
// for PostgreSQL) and checks the connection. Close closes what Open opened.
// Errors wrap dblock.ErrInvalidOption (a bad DSN, a database whose package
// is not imported) or dblock.ErrUnavailable, and never echo a password.
//
// The pool is dblock's: on MariaDB a pessimistic lock leaves its
// idle_transaction_timeout (the lock's TTL) on the session it used, so that
// the next lock there needs no statement to set it; transactions of the
// caller's on this pool are then ended by the server if they idle longer.
// Open a pool of your own for those, or wrap one with New.
func Open(ctx context.Context, dsn string) (*DB, error) {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	return &DB{s: s}, nil
}

// New wraps a *sql.DB the caller opened and keeps: Close does not close it.
// The database's package must be imported, as for Open.
//
// For MySQL/MariaDB, New checks the server flavour and refuses (with
// dblock.ErrInvalidOption) a pool whose connections set clientFoundRows,
// under which a lease acquire cannot tell "taken" from "held by another".
// What Open sets and New cannot (a pool's future connections are out of its
// reach) is the caller's to put in the DSN: parseTime=true, and on MySQL 8
// innodb_lock_wait_timeout=1, without which a lease acquire behind a
// pessimistic holder waits the server's lock wait timeout (50 s by default)
// instead of about a second (MariaDB bounds that statement itself);
// interpolateParams=true saves a round trip per statement. For PostgreSQL,
// Open also asks the server for TCP keepalives (tcp_keepalives_idle=10,
// tcp_keepalives_interval=5, tcp_keepalives_count=3), so the session of a
// vanished client, and the pessimistic locks it held, end within about 30 s:
// set them in the pool's runtime parameters to get the same.
func New(ctx context.Context, db *sql.DB, kind Kind) (*DB, error) {
	s, err := store.New(ctx, db, store.Kind(kind))
	if err != nil {
		return nil, err
	}
	return &DB{s: s}, nil
}

// Close closes the connection pool if Open opened it; a pool passed to New
// (or to postgres.FromPool) is left to its owner.
func (db *DB) Close() error { return db.s.Close() }

// Kind returns the database family.
func (db *DB) Kind() Kind { return Kind(db.s.Dialect.Kind()) }

// SQL returns the underlying *sql.DB, for the application's own statements
// (the fenced updates of package userrows, say).
func (db *DB) SQL() *sql.DB { return db.s.DB.DB }
