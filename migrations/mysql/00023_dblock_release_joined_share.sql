-- dblock: a reader that joined a readers' period releases its share without the name's row
-- while the period outlives the share (a new procedure, dblock_release_joined_share; the
-- application's role needs EXECUTE on it). dblock_release_share locks the row first, so readers
-- joining the period (which share-lock it) wait for each release's commit: readers of one name
-- take turns. The new one reads without a lock whether another reader's share reaches the
-- period's end; if so, it deletes the share and row-locks one such share of another reader
-- until the commit (FOR UPDATE SKIP LOCKED: never one that a concurrent release is deleting), so
-- the period's end needs no change and the name's row is not touched. When no such share can be
-- locked (the last readers releasing at once), or the share was re-entered, the share is kept
-- and the procedure calls dblock_release_share (the row locked, then the share deleted or its
-- entry count lowered, the rest counted). The client calls it for a read lease
-- that joined a period (its share ends with the period); a reader that began its period, most
-- often alone, keeps dblock_release_share, which does not pay for the first read. PostgreSQL's
-- release (postgres/00013) locks the row only when it may have to change it, as here.

-- +goose Up
-- +goose StatementBegin
CREATE PROCEDURE dblock_release_joined_share(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_token BIGINT)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_saved_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE v_now, v_lexp DATETIME(6);
    DECLARE v_version BIGINT;
    DECLARE v_owner VARBINARY(255);
    DECLARE v_others, v_pin INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        SET SESSION innodb_lock_wait_timeout = v_saved_wait;
        RESIGNAL;
    END;
    SET SESSION innodb_lock_wait_timeout = 1;
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SET v_now = UTC_TIMESTAMP(6);
    -- A read without a lock (SELECT ... INTO, its subquery included): does another reader's share
    -- reach the end of the period this share belongs to?
    SELECT l.version, l.owner, l.expires_at,
           EXISTS (SELECT 1 FROM dblock_shares s
                   WHERE s.name = p_name AND s.token = p_token AND s.owner <> p_owner AND s.expires_at >= l.expires_at)
    INTO v_version, v_owner, v_lexp, v_others
    FROM dblock_locks l WHERE l.name = p_name;
    IF v_others AND v_owner = '' AND v_version = p_token AND v_lexp > v_now THEN
        -- The period outlives this share: delete it, and keep one such share of another reader
        -- from going (a row lock, skipping any share another transaction is releasing), so the
        -- period's end stays right without the name's row. Readers joining the period are not
        -- kept waiting, as they are by a release that locks the row.
        DELETE FROM dblock_shares WHERE name = p_name AND owner = p_owner AND token = p_token AND reentry = 1;
        IF ROW_COUNT() = 1 THEN
            SELECT 1 INTO v_pin FROM dblock_shares s
            WHERE s.name = p_name AND s.token = p_token AND s.owner <> p_owner AND s.expires_at >= v_lexp
            LIMIT 1 FOR UPDATE SKIP LOCKED;
            IF v_pin THEN
                COMMIT;
                SET SESSION innodb_lock_wait_timeout = v_saved_wait;
                SELECT 1;
                LEAVE proc;
            END IF;
        END IF;
        -- Re-entered, or every such share is being released.
    END IF;
    -- dblock_release_share's way (its result set is this call's): the name's row locked before
    -- the share, the order of every other writer of both.
    ROLLBACK;
    SET SESSION innodb_lock_wait_timeout = v_saved_wait;
    CALL dblock_release_share(p_name, p_owner, p_token);
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE IF EXISTS dblock_release_joined_share;
