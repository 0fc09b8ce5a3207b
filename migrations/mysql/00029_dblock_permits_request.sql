-- dblock: each grant of a semaphore's permits records the request that made it (column
-- request: an id the client draws at random for each attempt), so that a client whose answer
-- was lost (its connection broke after the grant committed) reads its grant back and keeps
-- it, rather than leaving its permits out until the grant expires.
--
-- dblock_grant_permits is migration 00014's dblock_acquire_permits with the request as a
-- seventh argument, recorded with the grant (MariaDB; MySQL 8 creates it and does not call it).
-- dblock_acquire_permits stays for clients of earlier versions, whose grants record none. An
-- account that may not execute the new procedure (grants written before this migration) grants
-- in a transaction of plain statements instead, which records the request too.

-- +goose Up
ALTER TABLE dblock_permits ADD COLUMN request VARBINARY(64) NULL;

-- +goose StatementBegin
CREATE PROCEDURE dblock_grant_permits(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_limit INT,
                                      IN p_permits INT, IN p_ttl_us BIGINT,
                                      IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4,
                                      IN p_request VARBINARY(64))
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_now, v_next DATETIME(6);
    DECLARE v_lim INT;
    DECLARE v_used, v_tok BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        RESIGNAL;
    END;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT lim INTO v_lim FROM dblock_semaphores WHERE name = p_name FOR UPDATE;
    IF v_lim IS NULL THEN
        ROLLBACK;
        INSERT INTO dblock_semaphores (name, lim, updated_at) VALUES (p_name, p_limit, UTC_TIMESTAMP(6))
        ON DUPLICATE KEY UPDATE name = name;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        SELECT lim INTO v_lim FROM dblock_semaphores WHERE name = p_name FOR UPDATE;
    END IF;
    UPDATE dblock_semaphores SET updated_at = UTC_TIMESTAMP(6) WHERE name = p_name;
    SET v_now = UTC_TIMESTAMP(6);
    IF v_lim IS NULL OR v_lim <> p_limit THEN
        ROLLBACK;
        SELECT 0, 0, IFNULL(v_lim, 0), 0, 0, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now);
        LEAVE proc;
    END IF;
    SELECT IFNULL(SUM(p.permits), 0), MIN(p.expires_at) INTO v_used, v_next
    FROM dblock_permits p WHERE p.name = p_name AND p.expires_at > v_now LOCK IN SHARE MODE;
    IF v_used + p_permits > v_lim THEN
        ROLLBACK;
        SELECT 0, 0, v_lim, v_used, IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_next), 0),
               TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now);
        LEAVE proc;
    END IF;
    INSERT INTO dblock_permits (name, owner, permits, acquired_at, expires_at, metadata, request)
    VALUES (p_name, p_owner, p_permits, v_now, v_now + INTERVAL p_ttl_us MICROSECOND, p_metadata, p_request);
    SET v_tok = LAST_INSERT_ID();
    COMMIT;
    SELECT 1, v_tok, v_lim, v_used + p_permits, 0, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now);
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE dblock_grant_permits;
ALTER TABLE dblock_permits DROP COLUMN request;
