package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/recent"
)

// Kind names a database family.
type Kind string

// The supported kinds.
const (
	Postgres Kind = "postgres"
	MySQL    Kind = "mysql"
	SQLite   Kind = "sqlite"
)

// Caps are what a database can do; lock packages branch on these, never on Kind.
type Caps struct {
	Notify      bool // LISTEN/NOTIFY wake-ups (PostgreSQL).
	SkipLocked  bool // SELECT ... FOR UPDATE SKIP LOCKED.
	NoWait      bool // SELECT ... FOR UPDATE NOWAIT.
	RowLocks    bool // Row-level locks; false on SQLite (one writer per database).
	Returning   bool // INSERT/UPDATE ... RETURNING (MySQL reports through LAST_INSERT_ID and affected rows).
	AsyncCommit bool // Per-transaction asynchronous commit (synchronous_commit=off).
	// StatementLockTimeout: a statement can be told not to wait for row
	// locks (PostgreSQL NOWAIT, MariaDB SET STATEMENT innodb_lock_wait_timeout=0).
	// MySQL 8 waits up to its minimum innodb_lock_wait_timeout (1 s) instead.
	StatementLockTimeout bool
	// IdleTxTimeout: the server can end a transaction left idle past a
	// per-transaction timeout (idle_in_transaction_session_timeout,
	// idle_transaction_timeout).
	IdleTxTimeout bool
	// TxEndsOnDeadlock: a deadlock, or a savepoint found missing, means the
	// server rolled the whole transaction back, not one statement (MySQL,
	// MariaDB); statements after it run outside any transaction.
	TxEndsOnDeadlock bool
	// ErrorAbortsTx: any failed statement (a lock refused for NOWAIT or
	// its timeout, a deadlock) aborts its transaction (PostgreSQL): a wait
	// after a refusal needs a new transaction, and a hold that locks more
	// rows keeps what it had through a savepoint.
	ErrorAbortsTx bool
	// SavepointKeepsLocks: rolling back to a savepoint keeps the row locks
	// taken after it, and a locking read of a missing key locks its gap
	// (MySQL, MariaDB): a hold that locks more rows checks them without
	// locking first.
	SavepointKeepsLocks bool
	// LockWaitInSeconds: the server bounds a row-lock wait in whole seconds
	// only, and the driver gives a statement up by closing its connection,
	// which the server does not notice while the statement waits (MySQL,
	// MariaDB): the client stops a wait at its exact bound and cancels the
	// server's side of it, or a hold's statement, from another session.
	LockWaitInSeconds bool
	// LockWaitResumes: the database's own wait for a pessimistic lock can
	// end before the caller's bound (SQLite waits in chunks of its busy
	// timeout; MariaDB counts a statement's bound itself), and is resumed
	// until that bound. Elsewhere the database's wait ends at the bound.
	LockWaitResumes bool
	// TxEndCancellable: the driver ends a COMMIT or ROLLBACK whose context
	// is cancelled at once, network or not (pgx), so giving up on one
	// needs no goroutine.
	TxEndCancellable bool
}

// Dialect is one database's SQL, capabilities and error classification.
type Dialect interface {
	// Kind returns the database family.
	Kind() Kind
	// Caps returns the capability flags.
	Caps() Caps
	// Classify maps a driver error to dblock's sentinels, keeping the driver
	// error in the chain; unknown errors are returned unchanged; nil stays nil.
	Classify(err error) error
	// Placeholder returns the n-th (1-based) bind parameter marker.
	Placeholder(n int) string
	// Now is the SQL expression for the database clock.
	Now() string
	// IdentQuote is the character that quotes an identifier.
	IdentQuote() string
	// MigrateHint says how to apply the migrations for this dialect.
	MigrateHint() string

	// Lease returns the statements of lease (optimistic and fair) locks.
	Lease() *LeaseSQL
	// Row returns the statements of transaction-held (pessimistic) locks.
	Row() *RowSQL
	// Queue returns the statements of the fair wait queue.
	Queue() *QueueSQL
	// Reap returns the statements of the reaper.
	Reap() *ReapSQL
	// History returns the statements of the acquisition history.
	History() *HistorySQL
	// Shared returns the statements of read locks.
	Shared() *SharedSQL
	// Semaphore returns the statements of semaphores.
	Semaphore() *SemaphoreSQL
	// SharedReap returns the reaper's statements for shared locks.
	SharedReap() *SharedReapSQL
	// Slots returns the statements of scheduled jobs.
	Slots() *SlotSQL

	// attach returns the dialect of a new handle on sdb: this one, or one
	// that knows more of the server (MariaDB or MySQL; SQLite's file); it
	// refuses a pool dblock cannot work with.
	attach(ctx context.Context, sdb *sql.DB, a attachment) (Dialect, error)

	engine
}

// DB is a database handle with its dialect. Lock packages take a *DB.
type DB struct {
	*sqlx.DB
	Dialect Dialect

	owned  bool
	closer func() error
	// defersBegin: the pool's driver defers BEGIN where asked (see
	// DefersBegin).
	defersBegin bool
	// unwatched: the pool's connections restore an Unwatched context (a
	// pool Open opened, of a driver that says so: see unwatched.go).
	unwatched bool
	// native runs the pool's single statements through the driver's own
	// interface where it has one (nil: database/sql).
	native *Native
	// windows holds the deadline that statements bounded by
	// StatementContext share.
	windows stmtWindows
	// history caches whether the acquisition history is enabled.
	history historyProbe
	// prepared holds the hottest statements prepared (MySQL, a pool Open
	// opened; nil elsewhere: see prepared.go).
	prepared *preparedStmts
	// free holds when this DB last released each name (see takefree.go);
	// a name TakeFree did not take is forgotten.
	free recent.Names
	// joined holds when a read of each name last joined a running period
	// here (see shared_take.go); a name SharedSQL.Join did not join is
	// forgotten.
	joined recent.Names
	// noJoinedRelease: SharedSQL.ReleaseJoined's procedure is missing or
	// may not be executed here (see ReleaseJoinedShare).
	noJoinedRelease atomic.Bool
	// noDirect: QueueSQL.Direct's procedure is missing or may not be
	// executed (MariaDB before MySQL migration 00027, or grants written
	// before it); acquireGuarded uses its three statements.
	noDirect atomic.Bool
	// noHandOver: QueueSQL.HandOver's procedure is missing or may not be
	// executed (MariaDB before MySQL migration 00028, or grants written
	// before it); HandOver releases with the lease's release statement.
	noHandOver atomic.Bool
	// noGrantCall: SemaphoreSQL.Acquire's procedure may not be executed
	// (MariaDB, grants written before MySQL migration 00029);
	// AcquirePermits sends the transaction of plain statements.
	noGrantCall atomic.Bool
	// noAcquireRead: SharedSQL.Acquire's procedure is missing or may not
	// be executed (MariaDB before MySQL migration 00025, or grants written
	// before it); acquireShareOne uses SharedSQL.AcquireFallback.
	noAcquireRead atomic.Bool
	// readRecords: a CALL of SharedSQL.Acquire succeeded here, so the
	// schema records a reader alone in its name's row, and
	// SharedSQL.TakeFree may do so (see shared_take.go).
	readRecords atomic.Bool
}

// nativeOf is drv's native interface to pool, if it has one.
func nativeOf(drv *Driver, pool *sql.DB) *Native {
	if drv.Native == nil {
		return nil
	}
	return drv.Native(pool)
}

// Open connects to dsn (see dialect.Open) with the registered driver of its
// scheme, checks the connection, and learns the MySQL flavour. Close closes
// what Open opened.
func Open(ctx context.Context, dsn string) (*DB, error) {
	kind, rest, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	drv, err := driverFor(kind)
	if err != nil {
		return nil, err
	}
	sdb, err := drv.Open(rest)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	base := baseDialect(kind)
	if err := ping(pingCtx, sdb, base); err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("%w: connect to %s: %w", dblock.ErrUnavailable, Redact(dsn), err)
	}
	d, err := base.attach(pingCtx, sdb, attachment{dsn: rest, owned: true})
	if err != nil {
		_ = sdb.Close()
		return nil, err
	}
	db := &DB{DB: sqlx.NewDb(sdb, drv.Name), Dialect: d, owned: true, closer: sdb.Close, native: nativeOf(drv, sdb),
		defersBegin: drv.DeferredBegin, unwatched: drv.Unwatched}
	if kind == MySQL {
		db.prepared = newPrepared(db.DB, preparedSet(d)...)
	}
	return db, nil
}

// baseDialect returns the dialect of kind before its server is asked
// anything (MySQL's, which attach refines into MySQL's or MariaDB's): the
// one place where a kind picks its engine.
func baseDialect(kind Kind) Dialect {
	switch kind {
	case Postgres:
		return postgresDialect
	case MySQL:
		return mysqlFlavor
	}
	return sqliteDialectV
}

// attachment is what an engine's attach learns of a new handle: the
// driver's DSN (Open only) and whether dblock opened the pool (Open) or the
// caller did (New).
type attachment struct {
	dsn   string
	owned bool
}

// ping checks the first connection, trying again while the database says
// it is busy (d.Classify: ErrNotAcquired): on SQLite, switching a new file
// to WAL takes an exclusive lock without calling the busy handler, so
// processes opening a fresh file at the same moment get SQLITE_BUSY from
// the connection's set-up.
func ping(ctx context.Context, sdb *sql.DB, d Dialect) error {
	for backoff := 5 * time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		err := sdb.PingContext(ctx)
		if err == nil || !errors.Is(d.Classify(err), dblock.ErrNotAcquired) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// New wraps a *sql.DB the caller opened and keeps (see dialect.New): Close
// leaves it open. On MySQL it learns the flavour and refuses a pool that
// counts matched rows as affected.
func New(ctx context.Context, db *sql.DB, kind Kind) (*DB, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", dblock.ErrInvalidOption)
	}
	drv, err := driverFor(kind)
	if err != nil {
		return nil, err
	}
	d, err := baseDialect(kind).attach(ctx, db, attachment{})
	if err != nil {
		return nil, err
	}
	return &DB{DB: sqlx.NewDb(db, drv.Name), Dialect: d, native: nativeOf(drv, db)}, nil
}

// CloseWith makes Close call f (a handle over a pool the caller keeps, on a
// *sql.DB of dblock's own making, such as one over a *pgxpool.Pool).
func (db *DB) CloseWith(f func() error) { db.closer = f }

// Close closes the connection pool if Open opened it; a pool passed to New is
// left to its owner.
func (db *DB) Close() error {
	perr := db.prepared.close()
	if db.closer == nil {
		return perr
	}
	return errors.Join(perr, db.closer())
}

// Classify is db.Dialect.Classify.
func (db *DB) Classify(err error) error { return db.Dialect.Classify(err) }

// Querier is what statements run on: a *sqlx.DB, *sqlx.Tx or *sqlx.Conn.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error)
	QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
}

var (
	_ Querier = (*sqlx.DB)(nil)
	_ Querier = (*sqlx.Tx)(nil)
	_ Querier = (*sqlx.Conn)(nil)
)

// ParseDSN splits a dblock DSN into its dialect and the driver's own DSN.
// Schemes are matched in any case (POSTGRES://, MySQL://). Errors wrap
// dblock.ErrInvalidOption and never echo a password.
func ParseDSN(dsn string) (Kind, string, error) {
	dsn = strings.TrimSpace(dsn)
	lower := strings.ToLower(dsn)
	switch {
	case dsn == "":
		return "", "", fmt.Errorf("%w: empty DSN", dblock.ErrInvalidOption)
	case strings.HasPrefix(lower, "postgres://"):
		// The scheme in lower case: pgx recognises a URL by it.
		return Postgres, "postgres://" + dsn[len("postgres://"):], nil
	case strings.HasPrefix(lower, "postgresql://"):
		return Postgres, "postgresql://" + dsn[len("postgresql://"):], nil
	case strings.HasPrefix(lower, "mysql://"):
		return MySQL, dsn[len("mysql://"):], nil
	case strings.HasPrefix(lower, "sqlite://"):
		path := dsn[len("sqlite://"):]
		if path == "" {
			return "", "", fmt.Errorf("%w: sqlite DSN %q has no file path", dblock.ErrInvalidOption, dsn)
		}
		return SQLite, path, nil
	case strings.HasPrefix(lower, "sqlite:"):
		path := dsn[len("sqlite:"):]
		if path == "" {
			return "", "", fmt.Errorf("%w: sqlite DSN %q has no file path", dblock.ErrInvalidOption, dsn)
		}
		return SQLite, path, nil
	case strings.HasPrefix(lower, "file:"):
		path := dsn[len("file:"):]
		if path == "" {
			return "", "", fmt.Errorf("%w: sqlite DSN %q has no file path", dblock.ErrInvalidOption, dsn)
		}
		return SQLite, path, nil
	case kvDSN.MatchString(dsn) && pgKeyword.MatchString(dsn):
		// libpq's keyword/value form ("host=db dbname=app user=app"),
		// which pgx reads as it is.
		return Postgres, dsn, nil
	}
	scheme := "no scheme"
	if i := strings.Index(dsn, "://"); i > 0 {
		scheme = "scheme " + dsn[:i]
	}
	return "", "", fmt.Errorf("%w: DSN %s has %s (want a postgres://, postgresql://, mysql://, sqlite:// or file: DSN, or a PostgreSQL host=... dbname=... one)",
		dblock.ErrInvalidOption, Redact(dsn), scheme)
}

// Redact hides the passwords of a DSN for messages: the password of the
// user information (URL user:pass@host, and the go-sql-driver form
// user:pass@tcp(host)/db, split where the driver splits it), and the value
// of every parameter whose name ends in "password" (password, sslpassword),
// in a URL query (?password=...) or a keyword/value DSN (password='...').
// Anything else is kept, so the message still says which server was meant.
func Redact(dsn string) string {
	lower := strings.ToLower(strings.TrimSpace(dsn))
	switch {
	case strings.HasPrefix(lower, "mysql://"):
		i := strings.Index(dsn, "://") + 3
		return dsn[:i] + redactQuery(redactMySQLUser(dsn[i:]))
	case strings.Contains(dsn, "://"):
		return redactQuery(redactURLUser(dsn))
	case kvDSN.MatchString(dsn):
		return kvPassword.ReplaceAllString(dsn, "${1}${2}=xxxxx")
	case strings.Contains(dsn, "@"):
		return redactQuery(redactMySQLUser(dsn))
	}
	return redactQuery(dsn)
}

const redacted = "xxxxx"

var (
	// kvDSN: a libpq keyword/value DSN (host=h user=u ...), which has no
	// scheme and starts with a keyword.
	kvDSN = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)
	// pgKeyword: a keyword of a libpq keyword/value DSN that names a
	// server, database, user or service.
	pgKeyword = regexp.MustCompile(`(?:^|\s)(?:host|hostaddr|dbname|user|service|port)\s*=`)
	// kvPassword: a password keyword and its value, bare or single-quoted
	// (with backslash escapes), in a keyword/value DSN.
	kvPassword = regexp.MustCompile(`(?i)(^|\s)([a-z_]*password)\s*=\s*(?:'(?:[^'\\]|\\.)*'?|\S*)`)
	// queryPassword: a password parameter and its value in a URL query.
	queryPassword = regexp.MustCompile(`(?i)([?&;])([a-z_]*password)=[^&#]*`)
)

// redactQuery hides password parameters in the query of a URL-like DSN.
func redactQuery(dsn string) string {
	q := strings.IndexByte(dsn, '?')
	if q < 0 {
		return dsn
	}
	return dsn[:q] + queryPassword.ReplaceAllString(dsn[q:], "${1}${2}="+redacted)
}

// redactURLUser hides the password of scheme://user:pass@host/...: the
// authority ends at the first '/', '?' or '#', and the user information at
// its last '@' (as net/url reads it).
func redactURLUser(dsn string) string {
	start := strings.Index(dsn, "://") + 3
	end := len(dsn)
	if i := strings.IndexAny(dsn[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(dsn[start:end], "@")
	if at < 0 {
		return dsn
	}
	at += start
	colon := strings.IndexByte(dsn[start:at], ':')
	if colon < 0 || start+colon+1 == at {
		return dsn
	}
	return dsn[:start+colon+1] + redacted + dsn[at:]
}

// redactMySQLUser hides the password of a go-sql-driver DSN
// (user:pass@net(addr)/db?params), found as the driver finds it: the last
// '/', the last '@' before it, and the first ':' before that, so a password
// may hold '@', ':' or '/'.
func redactMySQLUser(dsn string) string {
	slash := strings.LastIndexByte(dsn, '/')
	if slash < 0 {
		slash = len(dsn)
	}
	at := strings.LastIndexByte(dsn[:slash], '@')
	if at < 0 {
		return dsn
	}
	colon := strings.IndexByte(dsn[:at], ':')
	if colon < 0 || colon+1 == at {
		return dsn
	}
	return dsn[:colon+1] + redacted + dsn[at:]
}

// PermissionDenied reports whether err is the server refusing the statement
// for want of a privilege (PostgreSQL 42501; MySQL/MariaDB 1142 table, 1143
// column, 1044 database access denied).
func PermissionDenied(err error) bool {
	if state, ok := pgState(err); ok {
		return state == "42501"
	}
	n, ok := mysqlCode(err)
	return ok && (n == 1142 || n == 1143 || n == 1044)
}

// IsRetryable reports whether err is worth retrying as it is: a deadlock
// (on MySQL/MariaDB also a Galera certification failure), a serialization
// failure, or a lock not available.
func IsRetryable(err error) bool {
	return errors.Is(err, dblock.ErrDeadlock) || errors.Is(err, dblock.ErrSerialization) ||
		errors.Is(err, dblock.ErrNotAcquired)
}

// connectionLost reports whether err says the connection to the server broke
// (reset, closed, refused, cut mid-answer) rather than that the server
// refused the statement. A statement whose connection broke may or may not
// have run: callers treat the outcome as unknown. A context's end is not a
// lost connection, although the driver may close the connection for it.
func connectionLost(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var opErr *net.OpError
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) || errors.As(err, &opErr)
}

// NotSent reports whether err says a statement never reached the server:
// the connection to it could not be made (refused, unreachable, failed
// start-up). Such a statement certainly did not run, unlike one whose
// established connection broke.
func NotSent(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) ||
		driverSays(err, func(d *Driver) func(error) bool { return d.NotSent })
}

// unavailable wraps err as dblock.ErrUnavailable.
func unavailable(err error) error { return fmt.Errorf("%w: %w", dblock.ErrUnavailable, err) }

// schemaMissing wraps err as dblock.ErrSchemaMissing with the migrate hint.
func schemaMissing(d Dialect, err error) error {
	return fmt.Errorf("%w: run the migrations: %s: %w", dblock.ErrSchemaMissing, d.MigrateHint(), err)
}

// notAcquired wraps a lock-timeout/NOWAIT error as dblock.ErrNotAcquired.
func notAcquired(err error) error { return fmt.Errorf("%w: %w", dblock.ErrNotAcquired, err) }

// Micros converts database microseconds since the Unix epoch to a time.
func Micros(us int64) time.Time { return time.UnixMicro(us).UTC() }
