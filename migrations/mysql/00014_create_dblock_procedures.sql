-- dblock: a reader's acquisition and release (package rwlock) and a semaphore's grant, each one
-- round trip: CALL of a procedure that runs the transaction the client would otherwise drive statement by statement
-- (six round trips for an acquisition). They are PostgreSQL's functions of the same names
-- (migrations/postgres/00005) in MySQL's words: READ COMMITTED, the name's row waited for a
-- second at most (the session's innodb_lock_wait_timeout, restored before the procedure
-- returns), a new readers' period's token the row's version + 1, and the row of a name never
-- seen before inserted first, outside the transaction, its first token above the fencing floor.
-- They run with the caller's rights (SQL SECURITY INVOKER): the application's role needs
-- EXECUTE on them beside its rights on the tables.
--
-- dblock_acquire_share joins the readers of a name without taking its row from the others
-- (LOCK IN SHARE MODE) while their period lasts at least half the TTL longer; otherwise it
-- locks the row FOR UPDATE and starts a period with a new token (a free or expired name),
-- joins (readers hold it and no writer waits, or the owner holds a share of the period
-- already), or records the read lease of the name's exclusive holder itself (a downgrade:
-- shared_until). It answers one row: acquired, token, holder, holder_mode, expires_us, now_us,
-- writer_waits, granted_us (how long the share got); a refusal answers the row as found.

-- +goose Up
-- +goose StatementBegin
CREATE PROCEDURE dblock_acquire_share(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl_us BIGINT,
                                      IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_saved_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE v_now, v_exp, v_lexp, v_wanted DATETIME(6);
    DECLARE v_version, v_tok BIGINT;
    DECLARE v_owner VARBINARY(255);
    DECLARE v_mode VARBINARY(32);
    DECLARE v_free, v_fresh, v_mine, v_try, v_join INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        ROLLBACK;
        SET SESSION innodb_lock_wait_timeout = v_saved_wait;
        RESIGNAL;
    END;
    SET SESSION innodb_lock_wait_timeout = 1;
    attempt: LOOP
        SET v_try = v_try + 1, v_version = NULL;
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
        SET v_now = UTC_TIMESTAMP(6);
        -- Join when readers hold the name long enough. The row is read first without a lock (a
        -- SELECT ... INTO: a subquery in IF or SET would take a share lock), since InnoDB keeps the
        -- share lock of a row that it read but did not match, and such a lock, upgraded below,
        -- deadlocks with any other transaction that waits for the row. A row that changed in
        -- between is let go first.
        SELECT COUNT(*) INTO v_join FROM dblock_locks l
        WHERE l.name = p_name AND l.owner = '' AND l.expires_at > v_now + INTERVAL (p_ttl_us DIV 2) MICROSECOND
          AND (l.wanted_until IS NULL OR l.wanted_until <= v_now OR EXISTS (
              SELECT 1 FROM dblock_shares s
              WHERE s.name = p_name AND s.owner = p_owner AND s.token = l.version AND s.expires_at > v_now));
        IF v_join THEN
            SET v_join = 0;
            SELECT l.version, l.expires_at INTO v_version, v_lexp FROM dblock_locks l
            WHERE l.name = p_name AND l.owner = '' AND l.expires_at > v_now + INTERVAL (p_ttl_us DIV 2) MICROSECOND
              AND (l.wanted_until IS NULL OR l.wanted_until <= v_now OR EXISTS (
                  SELECT 1 FROM dblock_shares s
                  WHERE s.name = p_name AND s.owner = p_owner AND s.token = l.version AND s.expires_at > v_now))
            LOCK IN SHARE MODE;
            IF v_version IS NOT NULL THEN
                -- Join: the share ends with the period at the latest.
                SET v_join = 1, v_tok = v_version, v_exp = LEAST(v_now + INTERVAL p_ttl_us MICROSECOND, v_lexp);
                LEAVE attempt;
            END IF;
            ROLLBACK;
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
            START TRANSACTION;
        END IF;
        SELECT l.version, IFNULL(l.owner, ''), l.owner IS NULL, IFNULL(l.mode, ''), l.expires_at, l.wanted_until
        INTO v_version, v_owner, v_free, v_mode, v_lexp, v_wanted
        FROM dblock_locks l WHERE l.name = p_name FOR UPDATE;
        IF v_version IS NOT NULL THEN
            LEAVE attempt;
        END IF;
        ROLLBACK;
        IF v_try > 3 THEN
            -- Deleted as often as inserted (the reaper): the caller retries, as after a lock wait.
            SIGNAL SQLSTATE 'HY000' SET MESSAGE_TEXT = 'dblock: the lock row keeps disappearing', MYSQL_ERRNO = 1205;
        END IF;
        INSERT INTO dblock_locks (name, reentry, version, updated_at)
        SELECT p_name, 0, f.floor + 1, UTC_TIMESTAMP(6) FROM dblock_fence f WHERE f.id = 1 LOCK IN SHARE MODE
        ON DUPLICATE KEY UPDATE name = name;
    END LOOP;

    IF NOT v_join THEN
        SET v_now = UTC_TIMESTAMP(6);
        SET v_fresh = v_free OR v_lexp IS NULL OR v_lexp <= v_now;
        SELECT COUNT(*) INTO v_mine FROM dblock_shares s
        WHERE s.name = p_name AND s.owner = p_owner AND s.token = v_version AND s.expires_at > v_now;
        IF NOT v_fresh AND v_owner <> p_owner AND (v_owner <> '' OR (IFNULL(v_wanted > v_now, 0) AND NOT v_mine)) THEN
            ROLLBACK;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 0, v_version, v_owner, v_mode, IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_lexp), 0),
                   TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now), v_owner = '' AND IFNULL(v_wanted > v_now, 0), 0;
            LEAVE proc;
        END IF;
        SET v_tok = IF(v_fresh, v_version + 1, v_version), v_exp = v_now + INTERVAL p_ttl_us MICROSECOND;
    END IF;
    INSERT INTO dblock_shares (name, owner, token, reentry, acquired_at, expires_at, metadata)
    VALUES (p_name, p_owner, v_tok, 1, v_now, v_exp, p_metadata)
    ON DUPLICATE KEY UPDATE
        reentry     = IF(token = VALUES(token), reentry + 1, 1),
        expires_at  = IF(token = VALUES(token), GREATEST(expires_at, VALUES(expires_at)), VALUES(expires_at)),
        acquired_at = IF(token = VALUES(token), acquired_at, VALUES(acquired_at)),
        metadata    = IF(token = VALUES(token), metadata, VALUES(metadata)),
        token       = VALUES(token);
    SELECT s.expires_at INTO v_exp FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner;
    IF v_join THEN
        SET v_exp = LEAST(v_exp, v_lexp); -- The row's lock is the others' too: it is not written.
    ELSEIF v_fresh THEN
        UPDATE dblock_locks SET owner = '', reentry = 1, version = v_tok, mode = 'read', acquired_at = v_now,
            expires_at = v_exp, shared_until = NULL, metadata = NULL, updated_at = v_now
        WHERE name = p_name;
    ELSEIF v_owner = '' THEN
        UPDATE dblock_locks SET expires_at = GREATEST(expires_at, v_exp), updated_at = v_now WHERE name = p_name;
    ELSE
        UPDATE dblock_locks SET expires_at = GREATEST(expires_at, v_exp),
            shared_until = GREATEST(IFNULL(shared_until, v_exp), v_exp), updated_at = v_now
        WHERE name = p_name;
    END IF;
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_saved_wait;
    SELECT 1, v_tok, '', '', 0, 0, 0, TIMESTAMPDIFF(MICROSECOND, v_now, v_exp);
END
-- +goose StatementEnd

-- dblock_release_share ends one entry of the owner's share at the token: its last entry
-- deletes it; then, when readers hold the name at that token, the unexpired shares left are
-- counted (none frees the name; else the latest of them ends the period), and an exclusive
-- holder's own read lease just ends. It answers one row: whether there was such a share.
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

-- dblock_acquire_permits is a semaphore's grant (package semaphore), PostgreSQL's function of
-- the same name (migrations/postgres/00007) in MySQL's words: the semaphore's row marked used and
-- locked (created with the caller's limit when missing), the permits of the unexpired grants
-- counted by a read of its own, which sees every grant committed before the lock was had, and
-- the grant inserted when they leave room. A caller naming another limit is answered with the
-- semaphore's own, granted nothing. It answers one row: granted, token (the grant's id), lim,
-- used, next_us (the earliest expiry among the grants out, when refused), now_us.
-- +goose StatementBegin
CREATE PROCEDURE dblock_acquire_permits(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_limit INT,
                                        IN p_permits INT, IN p_ttl_us BIGINT,
                                        IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4)
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
    INSERT INTO dblock_permits (name, owner, permits, acquired_at, expires_at, metadata)
    VALUES (p_name, p_owner, p_permits, v_now, v_now + INTERVAL p_ttl_us MICROSECOND, p_metadata);
    SET v_tok = LAST_INSERT_ID();
    COMMIT;
    SELECT 1, v_tok, v_lim, v_used + p_permits, 0, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now);
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE dblock_acquire_permits;
DROP PROCEDURE dblock_release_share;
DROP PROCEDURE dblock_acquire_share;
