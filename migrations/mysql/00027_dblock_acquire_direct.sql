-- dblock: dblock_acquire_direct(name, owner, ttl µs, mode, metadata) is a fair Acquire's or
-- TryAcquire's direct take of a name (MariaDB; PostgreSQL has it as one statement, QueueSQL.Direct):
-- it takes the name only while no live waiter of the lock's space queues for it, unless the owner
-- holds the name already (a re-entry), in one call. It answers one row: the acquire statement's ten
-- columns (taken, token or holder's version, holder, holder's mode, holder's expiry µs, clock µs,
-- entries, reservation's owner, since µs, until µs) and the number of live waiters. A name without
-- a row answers version 0 when nothing was taken.
--
-- The queue is read before the lock row is locked, and only a re-entry locks the row while waiters
-- queue, so that a direct take never makes the head's take (dblock_take_head, which skips a locked
-- row) miss its turn. Both reads are consistent reads of the transaction's statements under READ
-- COMMITTED: a waiter whose row committed before the call began is counted, and one that commits
-- later queued at the same time, so the database orders the two. The take itself is
-- dblock_take_head's (migration 00021): the row locked with SKIP LOCKED, a fresh take's token the
-- row's version plus one, a name without a row inserted above the fence's floor.
--
-- It replaces three statements: a lockless read of the queue, the acquisition, and a read of the
-- waiters created before it (after which a take that jumped one was released). MySQL 8 creates it
-- and does not call it.

-- +goose Up
-- +goose StatementBegin
CREATE PROCEDURE dblock_acquire_direct(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl_us BIGINT,
                                       IN p_mode VARCHAR(16) CHARACTER SET utf8mb4,
                                       IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_now, v_exp DATETIME(6);
    DECLARE v_version, v_waiters BIGINT;
    DECLARE v_reentry INT;
    DECLARE v_owner, v_next VARBINARY(255);
    DECLARE v_next_until DATETIME(6);
    DECLARE v_taken, v_exists, v_dup INT DEFAULT 0;
    DECLARE v_mine BOOLEAN;
    DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = 1;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT COUNT(*) INTO v_waiters FROM dblock_waiters w
    WHERE w.name = p_name AND w.expires_at > UTC_TIMESTAMP(6) AND w.kind <> 'semaphore';
    IF v_waiters > 0 THEN
        -- Only the holder's re-entry goes ahead of waiters: a read without a lock tells.
        SELECT l.owner = p_owner AND l.expires_at > UTC_TIMESTAMP(6) INTO v_mine
        FROM dblock_locks l WHERE l.name = p_name;
    END IF;
    IF v_waiters = 0 OR IFNULL(v_mine, FALSE) THEN
        SELECT l.version, l.owner, l.reentry, l.expires_at, l.next_owner, l.next_until
        INTO v_version, v_owner, v_reentry, v_exp, v_next, v_next_until
        FROM dblock_locks l WHERE l.name = p_name FOR UPDATE SKIP LOCKED;
        SET v_now = UTC_TIMESTAMP(6);
        IF v_version IS NULL THEN
            -- No row, or one another transaction holds (skipped, not taken): a read without a lock
            -- tells which. A concurrent insert of the name makes this one a duplicate (v_dup).
            SELECT COUNT(*) INTO v_exists FROM dblock_locks l WHERE l.name = p_name;
            IF NOT v_exists AND v_waiters = 0 THEN
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
        ELSEIF v_waiters = 0 AND (v_owner IS NULL OR v_exp <= v_now)
           AND NOT IFNULL(v_next_until > v_now AND NOT (v_next <=> p_owner), FALSE) THEN
            SET v_version = v_version + 1;
            UPDATE dblock_locks SET owner = p_owner, reentry = 1, version = v_version, mode = p_mode,
                acquired_at = v_now, expires_at = v_now + INTERVAL p_ttl_us MICROSECOND, metadata = p_metadata, updated_at = v_now,
                next_owner = NULL, next_since = NULL, next_until = NULL
            WHERE name = p_name;
            SET v_taken = 1, v_reentry = 1;
        END IF;
    END IF;
    IF NOT v_taken THEN
        ROLLBACK;
        SELECT 0, IFNULL(l.version, 0), IFNULL(l.owner, ''), IFNULL(l.mode, ''),
               IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.expires_at), 0),
               TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)), 0, IFNULL(l.next_owner, ''),
               IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.next_since), 0),
               IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', l.next_until), 0), v_waiters
        FROM (SELECT 1 AS one) AS one LEFT JOIN dblock_locks l ON l.name = p_name;
        LEAVE proc;
    END IF;
    COMMIT;
    SELECT 1, v_version, '', '', 0, 0, v_reentry, '', 0, 0, v_waiters;
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE IF EXISTS dblock_acquire_direct;
