-- dblock: a reader's release (dblock_release_share of 00014) writes less, as PostgreSQL's
-- (migrations/postgres/00010): it deletes its share in one statement (the entry count
-- lowered instead only when the owner re-entered), and leaves the name's row as it is while
-- other readers hold the name and the period's end stays where it was (readers who joined a
-- running period share its end), so most releases of one name's readers no longer write the
-- row. Its decisions are 00014's.

-- +goose Up
DROP PROCEDURE IF EXISTS dblock_release_share;

-- +goose StatementBegin
CREATE PROCEDURE dblock_release_share(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_token BIGINT)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_saved_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE v_now, v_lexp, v_last DATETIME(6);
    DECLARE v_version BIGINT;
    DECLARE v_owner VARBINARY(255);
    DECLARE v_n INT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        SET SESSION innodb_lock_wait_timeout = v_saved_wait;
        RESIGNAL;
    END;
    SET SESSION innodb_lock_wait_timeout = 1;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT l.version, l.owner, l.expires_at INTO v_version, v_owner, v_lexp
    FROM dblock_locks l WHERE l.name = p_name FOR UPDATE;
    DELETE FROM dblock_shares WHERE name = p_name AND owner = p_owner AND token = p_token AND reentry = 1;
    IF ROW_COUNT() = 0 THEN
        UPDATE dblock_shares SET reentry = reentry - 1
        WHERE name = p_name AND owner = p_owner AND token = p_token AND reentry > 1;
        SET v_n = ROW_COUNT();
        COMMIT;
        SET SESSION innodb_lock_wait_timeout = v_saved_wait;
        SELECT v_n > 0;
        LEAVE proc;
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    IF v_version = p_token AND v_lexp > v_now AND v_owner = p_owner THEN
        UPDATE dblock_locks SET shared_until = NULL, updated_at = v_now WHERE name = p_name;
    ELSEIF v_version = p_token AND v_lexp > v_now AND v_owner = '' THEN
        SELECT COUNT(*), MAX(s.expires_at) INTO v_n, v_last FROM dblock_shares s
        WHERE s.name = p_name AND s.token = p_token AND s.expires_at > v_now LOCK IN SHARE MODE;
        IF v_n = 0 THEN
            UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = v_now WHERE name = p_name;
        ELSEIF v_last < v_lexp THEN
            UPDATE dblock_locks SET expires_at = v_last, updated_at = v_now WHERE name = p_name;
        END IF;
    END IF;
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_saved_wait;
    SELECT 1;
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE IF EXISTS dblock_release_share;

-- +goose StatementBegin
CREATE PROCEDURE dblock_release_share(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_token BIGINT)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_saved_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE v_now, v_lexp, v_last DATETIME(6);
    DECLARE v_version BIGINT;
    DECLARE v_owner VARBINARY(255);
    DECLARE v_n INT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        SET SESSION innodb_lock_wait_timeout = v_saved_wait;
        RESIGNAL;
    END;
    SET SESSION innodb_lock_wait_timeout = 1;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT l.version, l.owner, l.expires_at INTO v_version, v_owner, v_lexp
    FROM dblock_locks l WHERE l.name = p_name FOR UPDATE;
    SELECT s.reentry INTO v_n FROM dblock_shares s
    WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry > 0 FOR UPDATE;
    IF v_n IS NULL THEN
        ROLLBACK;
        SET SESSION innodb_lock_wait_timeout = v_saved_wait;
        SELECT 0;
        LEAVE proc;
    END IF;
    IF v_n > 1 THEN
        UPDATE dblock_shares SET reentry = reentry - 1 WHERE name = p_name AND owner = p_owner;
    ELSE
        DELETE FROM dblock_shares WHERE name = p_name AND owner = p_owner;
        SET v_now = UTC_TIMESTAMP(6);
        IF v_version = p_token AND v_lexp > v_now AND v_owner = p_owner THEN
            UPDATE dblock_locks SET shared_until = NULL, updated_at = v_now WHERE name = p_name;
        ELSEIF v_version = p_token AND v_lexp > v_now AND v_owner = '' THEN
            SELECT COUNT(*), MAX(s.expires_at) INTO v_n, v_last FROM dblock_shares s
            WHERE s.name = p_name AND s.token = p_token AND s.expires_at > v_now LOCK IN SHARE MODE;
            IF v_n = 0 THEN
                UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = v_now WHERE name = p_name;
            ELSE
                UPDATE dblock_locks SET expires_at = v_last, updated_at = v_now WHERE name = p_name;
            END IF;
        END IF;
    END IF;
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_saved_wait;
    SELECT 1;
END
-- +goose StatementEnd
