-- dblock: dblock_hand_over(name, owner, token, waiter id, waiter's owner, ttl µs, mode, metadata) is a
-- fair lease's release that hands the name, in the same call, to a waiter of the releasing Locker
-- (MariaDB; PostgreSQL has it as one statement, QueueSQL.HandOver): when the waiter is live and no
-- live waiter of the lock's space is ahead of it, and the release frees the name (the holder's last
-- entry, no readers' period, no other owner's live reservation), the row becomes the waiter's lease
-- (token: the row's version plus one, as a fresh take's in dblock_take_head) and the waiter's row is
-- deleted, in one transaction. Otherwise it releases as the lease's release statement does. It
-- answers one row, (handed, the row's version, its entries, ''), or none when the lease was not held.
--
-- The lock row is locked first, as the release statement locks it, then the waiter's row: a
-- waiter's own take (dblock_take_head) locks them in the other order but skips a locked lock row,
-- and a Locker never hands a name to a waiter that is taking it. It replaces the release and the
-- waiter's take. MySQL 8 creates it and does not call it.

-- +goose Up
-- +goose StatementBegin
CREATE PROCEDURE dblock_hand_over(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_version BIGINT,
                                  IN p_id BIGINT, IN p_to VARBINARY(255), IN p_ttl_us BIGINT,
                                  IN p_mode VARCHAR(16) CHARACTER SET utf8mb4,
                                  IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_now, v_created, v_shared, v_next_until DATETIME(6);
    DECLARE v_reentry INT;
    DECLARE v_version, v_ahead BIGINT;
    DECLARE v_next VARBINARY(255);
    DECLARE v_hand INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT l.reentry, l.shared_until, l.next_owner, l.next_until INTO v_reentry, v_shared, v_next, v_next_until
    FROM dblock_locks l WHERE l.name = p_name AND l.owner = p_owner AND l.version = p_version FOR UPDATE;
    IF v_reentry IS NULL THEN
        ROLLBACK;
        SELECT 0, 0, 0, '' FROM DUAL WHERE 1 = 0;
        LEAVE proc;
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    IF v_reentry = 1 AND p_to <> p_owner AND NOT IFNULL(v_shared > v_now, FALSE)
       AND NOT IFNULL(v_next_until > v_now AND NOT (v_next <=> p_to), FALSE) THEN
        SELECT w.created_at INTO v_created FROM dblock_waiters w
        WHERE w.id = p_id AND w.name = p_name AND w.owner = p_to AND w.expires_at > v_now FOR UPDATE;
        IF v_created IS NOT NULL THEN
            -- The waiters ahead, in the lock's space (Check's count).
            SELECT COUNT(*) INTO v_ahead FROM dblock_waiters w
            WHERE w.name = p_name AND w.expires_at > v_now AND w.kind <> 'semaphore'
              AND (w.created_at < v_created OR (w.created_at = v_created AND w.id < p_id));
            SET v_hand = v_ahead = 0;
        END IF;
    END IF;
    IF v_hand THEN
        -- No other owner's reservation is live: one left is the waiter's or lapsed, and ends.
        UPDATE dblock_locks SET owner = p_to, reentry = 1, version = version + 1, mode = p_mode,
            acquired_at = v_now, expires_at = v_now + INTERVAL p_ttl_us MICROSECOND, metadata = p_metadata,
            updated_at = v_now, shared_until = NULL, reader = NULL,
            next_owner = NULL, next_since = NULL, next_until = NULL
        WHERE name = p_name;
        DELETE FROM dblock_waiters WHERE id = p_id;
    ELSE
        -- The release statement's assignments, in its order (each reads the values the earlier left).
        UPDATE dblock_locks SET
            owner        = IF(reentry > 1, owner, IF(shared_until > UTC_TIMESTAMP(6), '', NULL)),
            expires_at   = IF(reentry > 1, expires_at, IF(shared_until > UTC_TIMESTAMP(6), shared_until, NULL)),
            mode         = IF(reentry <= 1 AND shared_until > UTC_TIMESTAMP(6), 'read', mode),
            updated_at   = UTC_TIMESTAMP(6),
            shared_until = IF(reentry > 1, shared_until, NULL),
            reader       = NULL,
            reentry      = IF(reentry > 1, reentry - 1, IF(owner = '', 1, 0))
        WHERE name = p_name;
    END IF;
    SELECT l.version, l.reentry INTO v_version, v_reentry FROM dblock_locks l WHERE l.name = p_name;
    COMMIT;
    SELECT v_hand, v_version, v_reentry, '';
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE IF EXISTS dblock_hand_over;
