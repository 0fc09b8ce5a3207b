-- dblock: a fair waiter's steps in one call each (MariaDB; PostgreSQL has them as single statements,
-- QueueSQL.EnqueueCheck and TakeHead). MySQL 8 does not use them.
--
-- dblock_enqueue_check(name, owner, kind, heartbeat timeout µs) inserts a waiter and answers its
-- first check in the same call: its id, then Check's columns (live, the live waiters ahead of it in
-- its kind's way, the nearest one's heartbeat deadline µs, its created_at µs, whether the lock row
-- exists, its owner, version, mode and expiry µs, the clock µs). It replaces an insert and a check.
--
-- dblock_take_head(name, owner, ttl µs, mode, metadata, waiter id) is a fair waiter's take of
-- the lock in one call: it takes the name only while the waiter is live and no live waiter of the lock's space is ahead of it, and
-- deletes the waiter's row in the same transaction. It answers one row: the acquire statement's ten
-- columns (taken, token or holder's version, holder, holder's mode, holder's expiry µs, clock µs,
-- entries, reservation's owner, since µs, until µs) and whether the waiter was live.
--
-- The lock row is locked with SKIP LOCKED, as the acquire statement does: a row another
-- transaction holds (a pessimistic holder, a concurrent release) is a refusal, never a wait. A
-- fresh take's token is the row's version plus one, as a reader's fresh period is
-- (dblock_acquire_share); a name without a row starts above the fence's floor, read with a share
-- lock that waits for the reaper's raise of it, a single statement (MySQL 8, which also creates
-- these procedures, takes no SKIP LOCKED with LOCK IN SHARE MODE). It replaces a
-- transaction of four statements (START TRANSACTION, the acquire, the waiter's delete, COMMIT).

-- +goose Up
-- +goose StatementBegin
CREATE PROCEDURE dblock_enqueue_check(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_kind VARBINARY(16),
                                      IN p_timeout_us BIGINT)
SQL SECURITY INVOKER
MODIFIES SQL DATA
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DECLARE v_id BIGINT;
    INSERT INTO dblock_waiters (name, owner, kind, created_at, heartbeat_at, expires_at)
    VALUES (p_name, p_owner, p_kind, v_now, v_now, v_now + INTERVAL p_timeout_us MICROSECOND);
    SET v_id = LAST_INSERT_ID();
    -- Committed (autocommit): the check reads as Check would after it.
    SELECT v_id, 1,
        (SELECT COUNT(*) FROM dblock_waiters w
         WHERE w.name = p_name AND w.expires_at > UTC_TIMESTAMP(6)
           AND (w.created_at < v_now OR (w.created_at = v_now AND w.id < v_id))
           AND (w.kind = 'semaphore') = (p_kind = 'semaphore') AND (p_kind <> 'read' OR w.kind <> 'read')),
        COALESCE((SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', w.expires_at) FROM dblock_waiters w
         WHERE w.name = p_name AND w.expires_at > UTC_TIMESTAMP(6)
           AND (w.created_at < v_now OR (w.created_at = v_now AND w.id < v_id))
           AND (w.kind = 'semaphore') = (p_kind = 'semaphore') AND (p_kind <> 'read' OR w.kind <> 'read')
         ORDER BY w.created_at DESC, w.id DESC LIMIT 1), 0),
        TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now),
        CASE WHEN l.name IS NULL THEN 0 ELSE 1 END, COALESCE(l.owner, ''), COALESCE(l.version, 0), COALESCE(l.mode, ''),
        COALESCE(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at), 0),
        TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))
    FROM (SELECT 1 AS one) AS one LEFT JOIN dblock_locks l ON l.name = p_name;
END
-- +goose StatementEnd

-- +goose StatementBegin
CREATE PROCEDURE dblock_take_head(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl_us BIGINT,
                                  IN p_mode VARCHAR(16) CHARACTER SET utf8mb4,
                                  IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4, IN p_id BIGINT)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_now, v_created, v_exp DATETIME(6);
    DECLARE v_version, v_ahead BIGINT;
    DECLARE v_reentry INT;
    DECLARE v_owner, v_next VARBINARY(255);
    DECLARE v_next_until DATETIME(6);
    DECLARE v_live, v_taken, v_exists, v_dup INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = 1;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SET v_now = UTC_TIMESTAMP(6);
    SELECT w.created_at INTO v_created FROM dblock_waiters w
    WHERE w.id = p_id AND w.name = p_name AND w.expires_at > v_now;
    SET v_live = v_created IS NOT NULL;
    IF v_live THEN
        -- The waiters ahead, in the lock's space (Check's count).
        SELECT COUNT(*) INTO v_ahead FROM dblock_waiters w
        WHERE w.name = p_name AND w.expires_at > v_now AND w.kind <> 'semaphore'
          AND (w.created_at < v_created OR (w.created_at = v_created AND w.id < p_id));
    END IF;
    IF v_live AND v_ahead = 0 THEN
        SELECT l.version, l.owner, l.reentry, l.expires_at, l.next_owner, l.next_until
        INTO v_version, v_owner, v_reentry, v_exp, v_next, v_next_until
        FROM dblock_locks l WHERE l.name = p_name FOR UPDATE SKIP LOCKED;
        SET v_now = UTC_TIMESTAMP(6);
        IF v_version IS NULL THEN
            -- No row, or one another transaction holds (skipped, not taken): a read without a lock
            -- tells which, so the insert never waits for a holder's row. A concurrent insert of the
            -- name makes this one a duplicate (error 1062: v_dup), not taken either.
            SELECT COUNT(*) INTO v_exists FROM dblock_locks l WHERE l.name = p_name;
            IF NOT v_exists THEN
                INSERT INTO dblock_locks (name, owner, reentry, version, mode, acquired_at, expires_at, updated_at, metadata)
                SELECT p_name, p_owner, 1, f.floor + 1, p_mode, v_now, v_now + INTERVAL p_ttl_us MICROSECOND, v_now, p_metadata
                FROM dblock_fence f WHERE f.id = 1 LOCK IN SHARE MODE;
                IF NOT v_dup AND ROW_COUNT() = 1 THEN
                    SELECT l.version INTO v_version FROM dblock_locks l WHERE l.name = p_name;
                    SET v_taken = 1, v_reentry = 1;
                END IF;
            END IF;
        ELSEIF v_owner = p_owner AND v_exp > v_now THEN
            -- Re-entry by the holder.
            UPDATE dblock_locks SET reentry = reentry + 1,
                expires_at = GREATEST(expires_at, v_now + INTERVAL p_ttl_us MICROSECOND), updated_at = v_now,
                next_owner = IF(next_owner = p_owner OR next_until <= v_now, NULL, next_owner),
                next_since = IF(next_owner IS NULL, NULL, next_since),
                next_until = IF(next_owner IS NULL, NULL, next_until)
            WHERE name = p_name;
            SET v_taken = 1, v_reentry = v_reentry + 1;
        ELSEIF (v_owner IS NULL OR v_exp <= v_now)
           AND NOT IFNULL(v_next_until > v_now AND NOT (v_next <=> p_owner), FALSE) THEN
            SET v_version = v_version + 1;
            UPDATE dblock_locks SET owner = p_owner, reentry = 1, version = v_version, mode = p_mode,
                acquired_at = v_now, expires_at = v_now + INTERVAL p_ttl_us MICROSECOND, metadata = p_metadata, updated_at = v_now,
                next_owner = NULL, next_since = NULL, next_until = NULL
            WHERE name = p_name;
            SET v_taken = 1, v_reentry = 1;
        END IF;
    END IF;
    IF v_taken THEN
        DELETE FROM dblock_waiters WHERE id = p_id AND expires_at > UTC_TIMESTAMP(6);
        SET v_live = ROW_COUNT() = 1;
        SET v_taken = v_live;
    END IF;
    IF NOT v_taken THEN
        ROLLBACK;
        SELECT 0, IFNULL(l.version, 0), IFNULL(l.owner, ''), IFNULL(l.mode, ''),
               IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at), 0),
               TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)), 0, IFNULL(l.next_owner, ''),
               IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.next_since), 0),
               IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.next_until), 0), v_live
        FROM (SELECT 1 AS one) AS one LEFT JOIN dblock_locks l ON l.name = p_name;
        LEAVE proc;
    END IF;
    COMMIT;
    SELECT 1, v_version, '', '', 0, 0, v_reentry, '', 0, 0, 1;
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE IF EXISTS dblock_take_head;
DROP PROCEDURE IF EXISTS dblock_enqueue_check;
