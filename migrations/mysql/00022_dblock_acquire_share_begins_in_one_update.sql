-- dblock: a reader that begins a readers' period on a free name does it in fewer statements
-- (dblock_acquire_share of 00020, replaced; same results). The row was read without a lock to
-- decide whether to join, then locked, then written: now the read without a lock shows a free or
-- expired row (not kept for another owner), and one update, taking it only as read (its version),
-- begins the period; the share is inserted after it. A joiner's first read is that same plain
-- read, and it asks whether it holds a share of the period only while a writer waits. The rest
-- (a row changed in between, a row to insert, a refusal) goes the way it went.

-- +goose Up
DROP PROCEDURE IF EXISTS dblock_acquire_share;

-- +goose StatementBegin
CREATE PROCEDURE dblock_acquire_share(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl_us BIGINT,
                                      IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_saved_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE v_now, v_exp, v_lexp, v_wanted, v_next_until DATETIME(6);
    DECLARE v_version, v_tok BIGINT;
    DECLARE v_owner, v_next VARBINARY(255);
    DECLARE v_mode VARBINARY(32);
    DECLARE v_free, v_fresh, v_mine, v_try, v_join, v_begun INT DEFAULT 0;
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
        -- The row is read first without a lock (a SELECT ... INTO: a subquery in IF or SET would
        -- take a share lock), since InnoDB keeps the share lock of a row that it read but did not
        -- match, and such a lock, upgraded below, deadlocks with any other transaction that waits
        -- for the row. What it shows picks the way: a free name's period begins in one update
        -- that checks the row is as read; readers that hold the name long enough are joined; a
        -- row that changed in between is let go first.
        SELECT l.version, IFNULL(l.owner, ''), l.owner IS NULL, l.expires_at, l.wanted_until, l.next_owner, l.next_until
        INTO v_version, v_owner, v_free, v_lexp, v_wanted, v_next, v_next_until
        FROM dblock_locks l WHERE l.name = p_name;
        IF v_version IS NOT NULL AND (v_free OR v_lexp <= v_now)
           AND NOT IFNULL(v_next_until > v_now AND NOT (v_next <=> p_owner), FALSE) THEN
            -- Begin a period: the update takes the row only as read (its version), free or expired
            -- and not kept for another owner. A row lock waited for leaves the clock of before the
            -- wait: the period ends no later than it would have.
            UPDATE dblock_locks SET owner = '', reentry = 1, version = v_version + 1, mode = 'read', acquired_at = v_now,
                expires_at = v_now + INTERVAL p_ttl_us MICROSECOND, shared_until = NULL, metadata = NULL, updated_at = v_now,
                next_owner = NULL, next_since = NULL, next_until = NULL
            WHERE name = p_name AND version = v_version AND (owner IS NULL OR expires_at <= v_now)
              AND NOT IFNULL(next_until > v_now AND NOT (next_owner <=> p_owner), FALSE);
            IF ROW_COUNT() = 1 THEN
                -- v_owner says what the row holds now (readers), no longer the expired holder read.
                SET v_begun = 1, v_owner = '', v_tok = v_version + 1, v_exp = v_now + INTERVAL p_ttl_us MICROSECOND;
                LEAVE attempt;
            END IF;
        END IF;
        SET v_join = IFNULL(v_version IS NOT NULL AND NOT v_free AND v_owner = ''
            AND v_lexp > v_now + INTERVAL (p_ttl_us DIV 2) MICROSECOND, 0);
        IF v_join AND IFNULL(v_wanted > v_now, 0) THEN
            -- A writer waits: only a reader holding a share of the period joins (re-enters).
            SELECT COUNT(*) INTO v_join FROM dblock_shares s
            WHERE s.name = p_name AND s.owner = p_owner AND s.token = v_version AND s.expires_at > v_now;
        END IF;
        SET v_version = NULL;
        IF v_join THEN
            SET v_join = 0;
            SELECT l.version, l.expires_at INTO v_version, v_lexp FROM dblock_locks l
            WHERE l.name = p_name AND l.owner = '' AND l.expires_at > v_now + INTERVAL (p_ttl_us DIV 2) MICROSECOND
              AND (l.wanted_until IS NULL OR l.wanted_until <= v_now OR EXISTS (
                  SELECT 1 FROM dblock_shares s
                  WHERE s.name = p_name AND s.owner = p_owner AND s.token = l.version AND s.expires_at > v_now))
            LOCK IN SHARE MODE;
            -- The WHERE ran on the clock before the row lock's wait: the period must still last after it.
            SET v_now = UTC_TIMESTAMP(6);
            IF v_version IS NOT NULL AND v_lexp > v_now + INTERVAL (p_ttl_us DIV 2) MICROSECOND THEN
                -- Join: the share ends with the period at the latest.
                SET v_join = 1, v_tok = v_version, v_exp = LEAST(v_now + INTERVAL p_ttl_us MICROSECOND, v_lexp);
                LEAVE attempt;
            END IF;
            ROLLBACK;
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
            START TRANSACTION;
        END IF;
        SELECT l.version, IFNULL(l.owner, ''), l.owner IS NULL, IFNULL(l.mode, ''), l.expires_at, l.wanted_until,
               l.next_owner, l.next_until
        INTO v_version, v_owner, v_free, v_mode, v_lexp, v_wanted, v_next, v_next_until
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

    IF NOT v_join AND NOT v_begun THEN
        SET v_now = UTC_TIMESTAMP(6);
        SET v_fresh = v_free OR v_lexp IS NULL OR v_lexp <= v_now;
        IF v_fresh AND IFNULL(v_next_until > v_now AND v_next <> p_owner, 0) THEN
            -- Kept for a waiting writer (MySQL 00016): the refusal names it and the reservation's end.
            ROLLBACK;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 0, v_version, v_next, '', TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_next_until),
                   TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now), 0, 0;
            LEAVE proc;
        END IF;
        IF NOT v_fresh AND v_owner = '' AND IFNULL(v_wanted > v_now, 0) THEN
            -- Only a joiner kept out by a waiting writer asks whether it holds a share already.
            SELECT COUNT(*) INTO v_mine FROM dblock_shares s
            WHERE s.name = p_name AND s.owner = p_owner AND s.token = v_version AND s.expires_at > v_now;
        END IF;
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
    IF ROW_COUNT() <> 1 THEN
        -- The share existed (re-entered, or a share of an earlier period replaced): read what the
        -- update wrote. A new share (1 row affected) holds v_exp.
        SELECT s.expires_at INTO v_exp FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner;
    END IF;
    IF v_join THEN
        SET v_exp = LEAST(v_exp, v_lexp); -- The row's lock is the others' too: it is not written.
    ELSEIF v_fresh THEN
        UPDATE dblock_locks SET owner = '', reentry = 1, version = v_tok, mode = 'read', acquired_at = v_now,
            expires_at = v_exp, shared_until = NULL, metadata = NULL, updated_at = v_now,
            next_owner = NULL, next_since = NULL, next_until = NULL
        WHERE name = p_name;
    ELSEIF v_owner <> '' THEN -- The exclusive holder's own read lease (the others were refused).
        UPDATE dblock_locks SET expires_at = GREATEST(expires_at, v_exp),
            shared_until = GREATEST(IFNULL(shared_until, v_exp), v_exp), updated_at = v_now
        WHERE name = p_name;
    ELSEIF NOT v_begun THEN -- A begun period's update wrote the row already.
        UPDATE dblock_locks SET expires_at = GREATEST(expires_at, v_exp), updated_at = v_now WHERE name = p_name;
    END IF;
    COMMIT;
    SET SESSION innodb_lock_wait_timeout = v_saved_wait;
    SELECT 1, v_tok, '', '', 0, 0, 0, TIMESTAMPDIFF(MICROSECOND, v_now, v_exp);
END
-- +goose StatementEnd


-- +goose Down
DROP PROCEDURE IF EXISTS dblock_acquire_share;

-- +goose StatementBegin
CREATE PROCEDURE dblock_acquire_share(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl_us BIGINT,
                                      IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_saved_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE v_now, v_exp, v_lexp, v_wanted, v_next_until DATETIME(6);
    DECLARE v_version, v_tok BIGINT;
    DECLARE v_owner, v_next VARBINARY(255);
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
            -- The WHERE ran on the clock before the row lock's wait: the period must still last after it.
            SET v_now = UTC_TIMESTAMP(6);
            IF v_version IS NOT NULL AND v_lexp > v_now + INTERVAL (p_ttl_us DIV 2) MICROSECOND THEN
                -- Join: the share ends with the period at the latest.
                SET v_join = 1, v_tok = v_version, v_exp = LEAST(v_now + INTERVAL p_ttl_us MICROSECOND, v_lexp);
                LEAVE attempt;
            END IF;
            ROLLBACK;
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
            START TRANSACTION;
        END IF;
        SELECT l.version, IFNULL(l.owner, ''), l.owner IS NULL, IFNULL(l.mode, ''), l.expires_at, l.wanted_until,
               l.next_owner, l.next_until
        INTO v_version, v_owner, v_free, v_mode, v_lexp, v_wanted, v_next, v_next_until
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
        IF v_fresh AND IFNULL(v_next_until > v_now AND v_next <> p_owner, 0) THEN
            -- Kept for a waiting writer (MySQL 00016): the refusal names it and the reservation's end.
            ROLLBACK;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 0, v_version, v_next, '', TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_next_until),
                   TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now), 0, 0;
            LEAVE proc;
        END IF;
        IF NOT v_fresh AND v_owner = '' AND IFNULL(v_wanted > v_now, 0) THEN
            -- Only a joiner kept out by a waiting writer asks whether it holds a share already.
            SELECT COUNT(*) INTO v_mine FROM dblock_shares s
            WHERE s.name = p_name AND s.owner = p_owner AND s.token = v_version AND s.expires_at > v_now;
        END IF;
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
    IF ROW_COUNT() <> 1 THEN
        -- The share existed (re-entered, or a share of an earlier period replaced): read what the
        -- update wrote. A new share (1 row affected) holds v_exp.
        SELECT s.expires_at INTO v_exp FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner;
    END IF;
    IF v_join THEN
        SET v_exp = LEAST(v_exp, v_lexp); -- The row's lock is the others' too: it is not written.
    ELSEIF v_fresh THEN
        UPDATE dblock_locks SET owner = '', reentry = 1, version = v_tok, mode = 'read', acquired_at = v_now,
            expires_at = v_exp, shared_until = NULL, metadata = NULL, updated_at = v_now,
            next_owner = NULL, next_since = NULL, next_until = NULL
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

