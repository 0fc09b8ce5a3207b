package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

// The hand-written baselines. They run on dblock's own table, so a ratio to
// them measures dblock's SQL and Go overhead, not a different schema.

// pollInterval is how often the hand-written floor retries a held name: the
// common "sleep 10 ms and try again" loop.
const pollInterval = 10 * time.Millisecond

// ttlMicros is the lease the floor writes (30 s, as dblock's default).
const ttlMicros = int64(30 * time.Second / time.Microsecond)

const (
	pgFloorAcquire = `INSERT INTO dblock_locks (name, owner, reentry, version, expires_at, updated_at)
VALUES ($1, $2, 1, 1, now() + $3::bigint * interval '1 microsecond', now())
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner, reentry = 1, version = dblock_locks.version + 1,
    expires_at = excluded.expires_at, updated_at = excluded.updated_at
WHERE dblock_locks.owner IS NULL OR dblock_locks.expires_at <= now()
RETURNING version`
	pgFloorRelease = `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = now()
WHERE name = $1 AND owner = $2 AND version = $3`

	// owner is assigned after the columns that test the old holder, and
	// expires_at after owner (ON DUPLICATE KEY UPDATE assigns left to right).
	myFloorAcquire = `INSERT INTO dblock_locks (name, owner, reentry, version, expires_at, updated_at)
VALUES (?, ?, 1, LAST_INSERT_ID(1), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    version    = LAST_INSERT_ID(IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), version + 1, version)),
    reentry    = IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), 1, reentry),
    owner      = IF(owner IS NULL OR expires_at <= UTC_TIMESTAMP(6), VALUES(owner), owner),
    expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at),
    updated_at = IF(owner = VALUES(owner), VALUES(updated_at), updated_at)`
	myFloorRelease = `UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE name = ? AND owner = ? AND version = ?`
)

// floorTry runs the hand-written one-statement acquire; ok is false when the
// name is held.
func floorTry(ctx context.Context, db *dialect.DB, name, owner string) (version int64, ok bool, err error) {
	if store.Of(db).Dialect.Kind() == store.Postgres {
		err = db.SQL().QueryRowContext(ctx, pgFloorAcquire, name, owner, ttlMicros).Scan(&version)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, false, nil
		}
		return version, err == nil, err
	}
	r, err := db.SQL().ExecContext(ctx, myFloorAcquire, name, owner, ttlMicros)
	if err != nil {
		return 0, false, err
	}
	n, err := r.RowsAffected()
	if err != nil || n == 0 {
		return 0, false, err
	}
	version, err = r.LastInsertId()
	return version, err == nil, err
}

func floorRelease(ctx context.Context, db *dialect.DB, name, owner string, version int64) error {
	q := pgFloorRelease
	if store.Of(db).Dialect.Kind() == store.MySQL {
		q = myFloorRelease
	}
	return floorExec(ctx, db, q, name, owner, version)
}

// floorExec runs a floor release q, which must free exactly one row.
func floorExec(ctx context.Context, db *dialect.DB, q, name, owner string, version int64) error {
	r, err := db.SQL().ExecContext(ctx, q, name, owner, version)
	if err != nil {
		return err
	}
	if n, err := r.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("floor release %q: %d rows, %w", name, n, err)
	}
	return nil
}

// floorInstance is a hand-written floor: each goroutine (owner
// "<prefix>-<run>-<g>") takes the name with the floor's upsert, polling while
// it is held, and frees it with release.
func floorInstance(e *env, prefix string, release func(ctx context.Context, db *dialect.DB, name, owner string, version int64) error) *instance {
	return &instance{
		worker: func(_ context.Context, g int) (*worker, error) {
			owner := fmt.Sprintf("%s-%s-%d", prefix, e.prefix, g)
			return &worker{
				acquire: func(ctx context.Context, name string) (releaseFunc, error) {
					for {
						v, ok, err := floorTry(ctx, e.db, name, owner)
						if err != nil {
							return nil, err
						}
						if ok {
							return func(ctx context.Context) error { return release(ctx, e.db, name, owner, v) }, nil
						}
						if err := sleepCtx(ctx, pollInterval); err != nil {
							return nil, err
						}
					}
				},
				close: func() {},
			}, nil
		},
		close: func() {},
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func init() {
	register(&scenario{
		key: keyFloor, order: 10, title: "floor: upsert + CAS update (hand-written)",
		about: "Two autocommit statements written by hand on dblock's table: an upsert that takes a " +
			"free or expired row, and a compare-and-swap UPDATE on (name, owner, version) that frees it. " +
			"Synchronous commit, so two log flushes per acquire+release. Waiters poll every 10 ms.",
		setup: func(_ context.Context, e *env, _ bool) (*instance, error) {
			return floorInstance(e, "floor", floorRelease), nil
		},
	})

	register(&scenario{
		key: keyForUpdate, order: 20, title: "floor: BEGIN / SELECT … FOR UPDATE / COMMIT (hand-written)",
		about: "A transaction that locks the name's (pre-inserted) row with SELECT … FOR UPDATE and commits " +
			"at once; waiters queue in the database's lock manager.",
		setup: func(_ context.Context, e *env, _ bool) (*instance, error) {
			ensure := `INSERT INTO dblock_locks (name, reentry, version, updated_at) VALUES ($1, 0, 0, now()) ON CONFLICT (name) DO NOTHING`
			sel := `SELECT version FROM dblock_locks WHERE name = $1 FOR UPDATE`
			if e.kind == store.MySQL {
				ensure = `INSERT IGNORE INTO dblock_locks (name, reentry, version, updated_at) VALUES (?, 0, 0, UTC_TIMESTAMP(6))`
				sel = `SELECT version FROM dblock_locks WHERE name = ? FOR UPDATE`
			}
			return &instance{
				worker: func(_ context.Context, _ int) (*worker, error) {
					seen := map[string]bool{} // one goroutine's names
					return &worker{
						acquire: func(ctx context.Context, name string) (releaseFunc, error) {
							if !seen[name] { // the row is created once, then only locked
								if _, err := e.db.SQL().ExecContext(ctx, ensure, name); err != nil {
									return nil, err
								}
								seen[name] = true
							}
							for attempt := 0; ; attempt++ {
								tx, err := e.db.SQL().BeginTx(ctx, nil)
								if err != nil {
									return nil, err
								}
								var v int64
								err = tx.QueryRowContext(ctx, sel, name).Scan(&v)
								if err == nil {
									return func(context.Context) error { return tx.Commit() }, nil
								}
								_ = tx.Rollback()
								// MySQL bounds a row-lock wait (1 s here): wait again.
								if attempt >= 100 || !errors.Is(store.Of(e.db).Classify(err), dblock.ErrNotAcquired) {
									return nil, err
								}
							}
						},
						close: func() {},
					}, nil
				},
				close: func() {},
			}, nil
		},
	})

	register(&scenario{
		key: keySession, order: 30, title: "ceiling: session lock (pg_advisory_lock / GET_LOCK)",
		about: "The database's own session lock on a connection pinned per goroutine: pg_advisory_lock / " +
			"pg_advisory_unlock on PostgreSQL, GET_LOCK / RELEASE_LOCK on MySQL/MariaDB. Writes nothing, " +
			"so it is the non-durable ceiling, not a target.",
		setup: func(_ context.Context, e *env, _ bool) (*instance, error) {
			return &instance{
				worker: func(ctx context.Context, _ int) (*worker, error) {
					conn, err := e.db.SQL().Conn(ctx)
					if err != nil {
						return nil, err
					}
					w := &worker{close: func() { _ = conn.Close() }}
					if e.kind == store.Postgres {
						w.acquire = func(ctx context.Context, name string) (releaseFunc, error) {
							key := advisoryKey(name)
							if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
								return nil, err
							}
							return func(ctx context.Context) error {
								var ok bool
								if err := conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil {
									return err
								}
								if !ok {
									return fmt.Errorf("pg_advisory_unlock %q: not held", name)
								}
								return nil
							}, nil
						}
						return w, nil
					}
					w.acquire = func(ctx context.Context, name string) (releaseFunc, error) {
						for {
							var got sql.NullInt64
							if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 10)", name).Scan(&got); err != nil {
								return nil, err
							}
							if got.Valid && got.Int64 == 1 {
								break
							}
							if err := ctx.Err(); err != nil {
								return nil, err
							}
						}
						return func(ctx context.Context) error {
							var ok sql.NullInt64
							if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&ok); err != nil {
								return err
							}
							if !ok.Valid || ok.Int64 != 1 {
								return fmt.Errorf("RELEASE_LOCK %q: not held", name)
							}
							return nil
						}, nil
					}
					return w, nil
				},
				close: func() {},
			}, nil
		},
	})
}

func advisoryKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}
