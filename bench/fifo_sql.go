package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// fifoSQL is the hand-written FIFO lock's statements on one database
// (fifo.go): its schema, the lock row's insert, and the three steps.
type fifoSQL struct {
	schema []string
	row    string
	// join inserts the waiter's row of name: its id, whether the name is
	// free, and whether no waiter is ahead.
	join func(ctx context.Context, e *env, name string) (id int64, free, first bool, err error)
	// take takes name for waiter id (owner) when it is free and the
	// waiter first, deleting the waiter's row.
	take func(ctx context.Context, e *env, name string, id int64, owner string) (bool, error)
	// handOff releases owner's hold of name, handing it to the first
	// waiter (its id) or freeing it (0).
	handOff func(ctx context.Context, e *env, name, owner string) (int64, error)
}

// errFIFONotHeld is a release of a name its owner did not hold.
var errFIFONotHeld = errors.New("fifo: release of a name not held")

const (
	pgFIFOJoin = `WITH ins AS (
    INSERT INTO bench_fifo_waiters (name)
    SELECT $1 FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
    RETURNING id
)
SELECT ins.id, l.owner IS NULL,
    NOT EXISTS (SELECT 1 FROM bench_fifo_waiters w WHERE w.name = $1 AND w.id < ins.id)
FROM ins JOIN dblock_locks l ON l.name = $1`

	pgFIFOTake = `WITH u AS (
    UPDATE dblock_locks SET owner = $3, reentry = 1, version = version + 1,
        expires_at = now() + interval '30 seconds', updated_at = now()
    WHERE name = $1 AND owner IS NULL
      AND NOT EXISTS (SELECT 1 FROM bench_fifo_waiters w WHERE w.name = $1 AND w.id < $2)
    RETURNING version
)
DELETE FROM bench_fifo_waiters WHERE id = $2 AND EXISTS (SELECT 1 FROM u)
RETURNING id`

	// A release that frees the name commits asynchronously, as dblock's.
	pgFIFOHandOff = `WITH h AS (
    SELECT id FROM bench_fifo_waiters WHERE name = $1 ORDER BY id LIMIT 1
), u AS (
    UPDATE dblock_locks l SET owner = (SELECT 'w' || h.id FROM h),
        reentry = (SELECT count(*) FROM h), version = l.version + (SELECT count(*) FROM h),
        expires_at = (SELECT now() + interval '30 seconds' FROM h), updated_at = now()
    WHERE l.name = $1 AND l.owner = $2
    RETURNING l.owner
), d AS (
    DELETE FROM bench_fifo_waiters w USING h WHERE w.id = h.id AND EXISTS (SELECT 1 FROM u)
)
SELECT coalesce((SELECT h.id FROM h), 0),
    (SELECT set_config('synchronous_commit', 'off', true) WHERE NOT EXISTS (SELECT 1 FROM h))
FROM u`
)

var fifoPostgres = fifoSQL{
	schema: []string{
		`CREATE TABLE IF NOT EXISTS bench_fifo_waiters (id bigserial PRIMARY KEY, name text NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS bench_fifo_waiters_name_idx ON bench_fifo_waiters (name, id)`,
	},
	row: `INSERT INTO dblock_locks (name, owner, reentry, version, updated_at) VALUES ($1, NULL, 0, 0, now())
ON CONFLICT (name) DO NOTHING`,
	join: func(ctx context.Context, e *env, name string) (id int64, free, first bool, err error) {
		err = e.db.SQL().QueryRowContext(ctx, pgFIFOJoin, name).Scan(&id, &free, &first)
		return id, free, first, err
	},
	take: func(ctx context.Context, e *env, name string, id int64, owner string) (bool, error) {
		return fifoRow(e.db.SQL().QueryRowContext(ctx, pgFIFOTake, name, id, owner).Scan(&id))
	},
	handOff: func(ctx context.Context, e *env, name, owner string) (int64, error) {
		var next int64
		var async sql.NullString
		err := e.db.SQL().QueryRowContext(ctx, pgFIFOHandOff, name, owner).Scan(&next, &async)
		if errors.Is(err, sql.ErrNoRows) {
			err = errFIFONotHeld
		}
		return next, err
	},
}

// fifoRow reads a statement that returns a row when it did its work.
func fifoRow(err error) (bool, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// MySQL and MariaDB: each step is a procedure (one round trip), a
// transaction in READ COMMITTED as dblock's procedures; the join commits
// by itself (MySQL has no asynchronous commit per transaction).
// myFIFOBegin opens the take's and the hand-off's transaction, rolled
// back on any error.
const myFIFOBegin = `    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
`

var fifoMySQLProcs = map[string]string{
	"bench_fifo_join": `CREATE PROCEDURE bench_fifo_join(IN p_name VARBINARY(255))
BEGIN
    DECLARE v_id BIGINT;
    DECLARE v_owner VARBINARY(255);
    INSERT INTO bench_fifo_waiters (name) VALUES (p_name);
    SET v_id = LAST_INSERT_ID();
    SELECT owner INTO v_owner FROM dblock_locks WHERE name = p_name;
    SELECT v_id, v_owner IS NULL,
        NOT EXISTS (SELECT 1 FROM bench_fifo_waiters w WHERE w.name = p_name AND w.id < v_id);
END`,
	"bench_fifo_take": `CREATE PROCEDURE bench_fifo_take(IN p_name VARBINARY(255), IN p_id BIGINT, IN p_owner VARBINARY(255))
BEGIN
` + myFIFOBegin + `    UPDATE dblock_locks SET owner = p_owner, reentry = 1, version = version + 1,
        expires_at = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, updated_at = UTC_TIMESTAMP(6)
    WHERE name = p_name AND owner IS NULL
      AND NOT EXISTS (SELECT 1 FROM bench_fifo_waiters w WHERE w.name = p_name AND w.id < p_id);
    IF ROW_COUNT() = 1 THEN
        DELETE FROM bench_fifo_waiters WHERE id = p_id;
        COMMIT;
        SELECT 1;
    ELSE
        ROLLBACK;
        SELECT 0;
    END IF;
END`,
	"bench_fifo_hand_off": `CREATE PROCEDURE bench_fifo_hand_off(IN p_name VARBINARY(255), IN p_owner VARBINARY(255))
BEGIN
    DECLARE v_next BIGINT;
` + myFIFOBegin + `    SET v_next = (SELECT id FROM bench_fifo_waiters WHERE name = p_name ORDER BY id LIMIT 1);
    UPDATE dblock_locks SET owner = IF(v_next IS NULL, NULL, CONCAT('w', v_next)),
        reentry = v_next IS NOT NULL, version = version + (v_next IS NOT NULL),
        expires_at = IF(v_next IS NULL, NULL, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND), updated_at = UTC_TIMESTAMP(6)
    WHERE name = p_name AND owner = p_owner;
    IF ROW_COUNT() = 1 THEN
        IF v_next IS NOT NULL THEN
            DELETE FROM bench_fifo_waiters WHERE id = v_next;
        END IF;
        COMMIT;
        SELECT IFNULL(v_next, 0);
    ELSE
        ROLLBACK;
        SELECT -1;
    END IF;
END`,
}

var fifoMySQL = fifoSQL{
	schema: []string{
		`CREATE TABLE IF NOT EXISTS bench_fifo_waiters (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARBINARY(255) NOT NULL, KEY bench_fifo_waiters_name_idx (name, id)) ENGINE=InnoDB`,
	},
	row: `INSERT IGNORE INTO dblock_locks (name, owner, reentry, version, updated_at) VALUES (?, NULL, 0, 0, UTC_TIMESTAMP(6))`,
	join: func(ctx context.Context, e *env, name string) (id int64, free, first bool, err error) {
		err = e.db.SQL().QueryRowContext(ctx, `CALL bench_fifo_join(?)`, name).Scan(&id, &free, &first)
		return id, free, first, err
	},
	take: func(ctx context.Context, e *env, name string, id int64, owner string) (bool, error) {
		var took bool
		err := e.db.SQL().QueryRowContext(ctx, `CALL bench_fifo_take(?, ?, ?)`, name, id, owner).Scan(&took)
		return took, err
	},
	handOff: func(ctx context.Context, e *env, name, owner string) (int64, error) {
		var next int64
		err := e.db.SQL().QueryRowContext(ctx, `CALL bench_fifo_hand_off(?, ?)`, name, owner).Scan(&next)
		if err == nil && next < 0 {
			err = errFIFONotHeld
		}
		return next, err
	},
}

// fifoMySQLSchema creates the procedures that are missing (MySQL has no
// CREATE PROCEDURE IF NOT EXISTS).
func fifoMySQLSchema(ctx context.Context, e *env) error {
	for name, create := range fifoMySQLProcs {
		var n int
		err := e.db.SQL().QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.routines
WHERE routine_schema = DATABASE() AND routine_name = ?`, name).Scan(&n)
		if err == nil && n == 0 {
			_, err = e.db.SQL().ExecContext(ctx, create)
		}
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("fifo procedure %s: %w", name, err)
		}
	}
	return nil
}
