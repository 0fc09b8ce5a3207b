package migrations

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

// mysqlLockName is the SQL expression of the named lock (GET_LOCK) that
// serialises migration runs on one MySQL/MariaDB database: per database (a
// hash of DATABASE(), since GET_LOCK names are server-wide; at most 64
// characters, as GET_LOCK requires), and never goose's own name, so dblock's
// runs neither wait for nor block an application's goose runs.
const mysqlLockName = "CONCAT('dblock_migrate:', SHA1(COALESCE(DATABASE(), '')))"

// lockRun serialises a whole run on MySQL/MariaDB and returns the function
// that ends it; elsewhere it does nothing (PostgreSQL runs take goose's
// session lock, SQLite runs are retried; see run).
//
// The named lock is held on a connection of its own around the whole run,
// not through goose's SessionLocker: goose's Up first asks HasPending, which
// creates the version table outside any lock, and MySQL commits that CREATE
// TABLE before the version-zero row, so a concurrent run could find the
// table empty and fail with "missing zero version migration". A session that
// dies releases its named locks, so a crashed run never blocks the next.
func lockRun(ctx context.Context, db *store.DB) (unlock func(), err error) {
	if db.Dialect.Kind() != store.MySQL || db.Stats().MaxOpenConnections == 1 {
		// A pool of one connection cannot hold the lock on a second one
		// while goose migrates: such a run goes unserialised, as before.
		return func() {}, nil
	}
	conn, err := db.DB.DB.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: take the migration lock: %w", db.Classify(err))
	}
	if err := getLock(ctx, conn); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(ctx, "DO RELEASE_LOCK("+mysqlLockName+")"); err != nil {
			// The session must not go back to the pool holding the lock.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}, nil
}

// getLock takes the named lock on conn, trying every second (a GET_LOCK
// with a 1 s timeout) until ctx ends or lockRetries tries have failed.
func getLock(ctx context.Context, conn *sql.Conn) error {
	for try := 1; ; try++ {
		var got sql.NullInt64
		err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+mysqlLockName+", ?)", lockRetryPeriod).Scan(&got)
		switch {
		case err != nil:
			return fmt.Errorf("migrations: take the migration lock: %w", err)
		case got.Valid && got.Int64 == 1:
			return nil
		case !got.Valid:
			return errors.New("migrations: take the migration lock: GET_LOCK failed")
		case try >= lockRetries:
			return fmt.Errorf("migrations: %w: another migration run held the lock for %d s", dblock.ErrNotAcquired, lockRetries*lockRetryPeriod)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
