package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/dblock-go/dblock"
)

// mysqlDialect serves MySQL 8 and MariaDB 10.6+; mariadb selects the flavour's
// statements (MariaDB can bound a single statement's lock wait with SET STATEMENT).
type mysqlDialect struct {
	server
	mariadb bool
}

var (
	mysqlFlavor   Dialect = mysqlDialect{}
	mariadbFlavor Dialect = mysqlDialect{mariadb: true}
)

// MySQLDialect returns the MySQL (mariadb=false) or MariaDB dialect.
func MySQLDialect(mariadb bool) Dialect {
	if mariadb {
		return mariadbFlavor
	}
	return mysqlFlavor
}

func (mysqlDialect) Kind() Kind { return MySQL }

func (d mysqlDialect) Caps() Caps {
	return Caps{SkipLocked: true, NoWait: true, RowLocks: true, StatementLockTimeout: d.mariadb, IdleTxTimeout: d.mariadb,
		TxEndsOnDeadlock: true, SavepointKeepsLocks: true, LockWaitInSeconds: true, LockWaitResumes: d.mariadb}
}

func (mysqlDialect) Placeholder(int) string { return "?" }
func (mysqlDialect) IdentQuote() string     { return "`" }
func (mysqlDialect) Now() string            { return "UTC_TIMESTAMP(6)" }

// MariaDB reports whether the server is MariaDB.
func (d mysqlDialect) MariaDB() bool { return d.mariadb }

// MariaDB reports whether db is a MariaDB server (for tests: the engines
// read their own flavour).
func (db *DB) MariaDB() bool {
	m, ok := db.Dialect.(mysqlDialect)
	return ok && m.mariadb
}

// MigrateHint names goose's DSN form: go-sql-driver's, without the mysql://
// scheme of a dblock DSN, and with parseTime (goose reads its own times).
func (mysqlDialect) MigrateHint() string {
	return `dblock migrate up (or: goose -dir migrations/mysql -table dblock_db_version mysql ` +
		`"user:pass@tcp(host:3306)/db?parseTime=true" up, the DSN without mysql://)`
}

func (d mysqlDialect) Lease() *LeaseSQL {
	if d.mariadb {
		return &mariadbLease
	}
	return &mysqlLease
}

func (d mysqlDialect) Row() *RowSQL {
	if d.mariadb {
		return &mariadbRow
	}
	return &mysqlRow
}

func (d mysqlDialect) Queue() *QueueSQL {
	if d.mariadb {
		return &mariadbQueue
	}
	return &mysqlQueue
}

func (d mysqlDialect) History() *HistorySQL {
	if d.mariadb {
		return &mariadbHistory
	}
	return &mysqlHistory
}
func (d mysqlDialect) Shared() *SharedSQL {
	if d.mariadb {
		return &mariadbShared
	}
	return &mysqlShared
}
func (mysqlDialect) SharedReap() *SharedReapSQL { return &mysqlSharedReap }
func (mysqlDialect) Slots() *SlotSQL            { return &mysqlSlots }

func (d mysqlDialect) Semaphore() *SemaphoreSQL {
	if d.mariadb {
		return &mariadbSemaphore
	}
	return &mysqlSemaphore
}

func (d mysqlDialect) Reap() *ReapSQL {
	if d.mariadb {
		return &mariadbReap
	}
	return &mysqlReap
}

// Classify maps MySQL/MariaDB error numbers:
//
//	1205 lock wait timeout, 3572 NOWAIT             -> ErrNotAcquired
//	1213 deadlock (and Galera certification failure) -> ErrDeadlock
//	1146 no such table, 1054 no such column,
//	1305 no such procedure                          -> ErrSchemaMissing
//	1047 WSREP not ready, 1180 commit failed for
//	want of a primary component (Galera quorum lost) -> ErrUnavailable
//	invalid/closed connection                       -> ErrUnavailable
func (d mysqlDialect) Classify(err error) error {
	if err == nil {
		return nil
	}
	if se, ok := serverError(MySQL, err); ok {
		switch se.Code {
		case 1205, 3572:
			return notAcquired(err)
		case 1213:
			return fmt.Errorf("%w: %w", dblock.ErrDeadlock, err)
		case 1146, 1054, 1305:
			return schemaMissing(d, err)
		case 1047, 1053, 2006, 2013, 4031:
			return unavailable(err)
		case 1180:
			// "Got error during COMMIT": on Galera, a node that lost the
			// primary component fails commits so ("Not connected to Primary
			// Component"); the cluster, not the statement, is at fault.
			if m := strings.ToLower(se.Message); strings.Contains(m, "primary component") || strings.Contains(m, "wsrep") {
				return unavailable(err)
			}
		}
		return err
	}
	if drivers[MySQL].ConnLost(err) || connectionLost(err) {
		return unavailable(err)
	}
	return err
}

// detectMySQL tells MariaDB from MySQL by the server version.
func detectMySQL(ctx context.Context, db *sql.DB) (Dialect, error) {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, fmt.Errorf("%w: mysql: read server version: %w", dblock.ErrUnavailable, err)
	}
	return MySQLDialect(strings.Contains(strings.ToLower(version), "mariadb")), nil
}

// attach learns the flavour (MariaDB or MySQL) and, on a pool the caller
// opened, refuses one that counts matched rows as affected (Open's own
// pools never do).
func (mysqlDialect) attach(ctx context.Context, sdb *sql.DB, a attachment) (Dialect, error) {
	d, err := detectMySQL(ctx, sdb)
	if err != nil || a.owned {
		return d, err
	}
	if err := checkChangedRows(ctx, sdb); err != nil {
		return nil, err
	}
	return d, nil
}

// checkChangedRows refuses a MySQL pool whose connections report matched
// rows rather than changed rows as affected (go-sql-driver's
// clientFoundRows=true): a lease acquire that found the name held changes
// nothing but matches its row, so it would look acquired and two owners
// could hold one name. The probe is an UPDATE that matches one row and
// changes nothing, on a temporary table of its own (no schema needed,
// visible to no other session) or, where the role may not create one, on
// the fencing floor's row. When neither can run, the pool is accepted.
func checkChangedRows(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("%w: mysql: %w", dblock.ErrUnavailable, err)
	}
	defer conn.Close()
	var affected int64 = -1
	_, err = conn.ExecContext(ctx, "CREATE TEMPORARY TABLE dblock_probe_changed_rows (id INT NOT NULL PRIMARY KEY)")
	if err == nil {
		defer func() {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "DROP TEMPORARY TABLE IF EXISTS dblock_probe_changed_rows")
		}()
		if _, err := conn.ExecContext(ctx, "INSERT INTO dblock_probe_changed_rows (id) VALUES (1)"); err != nil {
			return fmt.Errorf("mysql: probe affected rows: %w", mysqlDialect{}.Classify(err))
		}
		r, err := conn.ExecContext(ctx, "UPDATE dblock_probe_changed_rows SET id = id WHERE id = 1")
		if err != nil {
			return fmt.Errorf("mysql: probe affected rows: %w", mysqlDialect{}.Classify(err))
		}
		affected, _ = r.RowsAffected()
	} else {
		// No temporary tables for this role: the fence row, if migrated.
		var floor int64
		if conn.QueryRowContext(ctx, "SELECT floor FROM dblock_fence WHERE id = 1").Scan(&floor) == nil {
			if r, err := conn.ExecContext(ctx, "UPDATE dblock_fence SET floor = floor WHERE id = 1"); err == nil {
				affected, _ = r.RowsAffected()
			}
		}
	}
	if affected > 0 {
		return fmt.Errorf("%w: mysql: the connection counts matched rows as affected (clientFoundRows=true); "+
			"dblock needs changed rows to tell an acquisition from a lock held by another owner: open the pool without clientFoundRows",
			dblock.ErrInvalidOption)
	}
	return nil
}

// ErrMultiPrimary is returned (wrapped) where a row lock would not exclude
// clients of other nodes: a Galera cluster certifies writes at commit, so
// SELECT ... FOR UPDATE locks the row on the node that ran it only.
var ErrMultiPrimary = errors.New("row locks are local to one node of a multi-primary (Galera) cluster")

// rowLocksExclusive asks whether Galera replication is on (see
// RowLocksExclusive).
func (mysqlDialect) rowLocksExclusive(ctx context.Context, db *DB) (bool, error) {
	var on, provider sql.NullString
	err := db.QueryRowxContext(ctx, "SELECT @@GLOBAL.wsrep_on, @@GLOBAL.wsrep_provider").Scan(&on, &provider)
	if mysqlError(err, 1193) { // Unknown system variable: no Galera (MySQL).
		return true, nil
	}
	if err != nil {
		return false, db.Classify(err)
	}
	enabled := on.String == "1" || strings.EqualFold(on.String, "ON")
	return !(enabled && provider.String != "" && !strings.EqualFold(provider.String, "none")), nil
}
