-- dblock: MariaDB records a name's only reader in the name's row (column reader, MySQL migration
-- 00024), with no row of dblock_shares, as PostgreSQL's migration 00017 does: its acquisition is
-- one update of the row, its release another, as an exclusive lease's are. A readers' period that
-- a second reader joins moves the first into dblock_shares (the row's reentry, acquired_at,
-- expires_at and metadata become its share's) and goes on as before. reader is meaningful only
-- while owner is '' (a readers' period); every statement that makes owner '' sets it.
--
-- The new procedure dblock_acquire_read records the reader (this version's clients call it; the
-- application's role needs EXECUTE on it, and a client whose role may not execute it calls
-- dblock_acquire_share instead). dblock_acquire_share, which earlier clients call, keeps every
-- reader in dblock_shares, so every renewal and listing of an earlier client finds its shares
-- where it looks. The two are one body but for v_sole (MariaDB's privileges are per procedure:
-- one calling the other would need a grant that earlier roles lack). Either moves a recorded
-- reader into dblock_shares when it joins the period, and joins without the row's lock only a
-- period without one. dblock_release_share releases a recorded reader with one update of the
-- row and otherwise goes on as in 00015. A history trigger installed by `dblock history --enable`
-- is replaced so that it records a recorded reader's acquisition when it ends (a prepared
-- statement, run only where the trigger is there).

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
    DECLARE v_owner, v_next, v_reader VARBINARY(255);
    DECLARE v_acq DATETIME(6);
    DECLARE v_meta VARCHAR(1024) CHARACTER SET utf8mb4;
    DECLARE v_reentry INT;
    DECLARE v_sole INT DEFAULT 0;
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
        SELECT l.version, IFNULL(l.owner, ''), l.owner IS NULL, l.expires_at, l.wanted_until, l.next_owner, l.next_until, l.reader
        INTO v_version, v_owner, v_free, v_lexp, v_wanted, v_next, v_next_until, v_reader
        FROM dblock_locks l WHERE l.name = p_name;
        IF v_version IS NOT NULL AND (v_free OR v_lexp <= v_now)
           AND NOT IFNULL(v_next_until > v_now AND NOT (v_next <=> p_owner), FALSE) THEN
            -- Begin a period: the update takes the row only as read (its version), free or expired
            -- and not kept for another owner. A row lock waited for leaves the clock of before the
            -- wait: the period ends no later than it would have. Its reader is recorded in the row
            -- (v_sole), or gets a share below.
            UPDATE dblock_locks SET owner = '', reentry = 1, version = v_version + 1, mode = 'read', acquired_at = v_now,
                expires_at = v_now + INTERVAL p_ttl_us MICROSECOND, shared_until = NULL, updated_at = v_now,
                metadata = IF(v_sole, p_metadata, NULL), reader = IF(v_sole, p_owner, NULL),
                next_owner = NULL, next_since = NULL, next_until = NULL
            WHERE name = p_name AND version = v_version AND (owner IS NULL OR expires_at <= v_now)
              AND NOT IFNULL(next_until > v_now AND NOT (next_owner <=> p_owner), FALSE);
            IF ROW_COUNT() = 1 THEN
                -- v_owner says what the row holds now (readers), no longer the expired holder read.
                SET v_begun = 1, v_owner = '', v_tok = v_version + 1, v_exp = v_now + INTERVAL p_ttl_us MICROSECOND;
                IF v_sole THEN
                    COMMIT;
                    SET SESSION innodb_lock_wait_timeout = v_saved_wait;
                    SELECT 1, v_tok, '', '', 0, 0, 0, p_ttl_us;
                    LEAVE proc;
                END IF;
                LEAVE attempt;
            END IF;
        END IF;
        -- Joined without the row's lock: only a period whose readers are all in dblock_shares.
        SET v_join = IFNULL(v_version IS NOT NULL AND NOT v_free AND v_owner = '' AND v_reader IS NULL
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
            WHERE l.name = p_name AND l.owner = '' AND l.reader IS NULL
              AND l.expires_at > v_now + INTERVAL (p_ttl_us DIV 2) MICROSECOND
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
               l.next_owner, l.next_until, l.reader, l.reentry, l.acquired_at, l.metadata
        INTO v_version, v_owner, v_free, v_mode, v_lexp, v_wanted, v_next, v_next_until, v_reader, v_reentry, v_acq, v_meta
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
            SET v_mine = v_mine OR v_reader <=> p_owner;
        END IF;
        IF NOT v_fresh AND v_owner <> p_owner AND (v_owner <> '' OR (IFNULL(v_wanted > v_now, 0) AND NOT v_mine)) THEN
            ROLLBACK;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 0, v_version, v_owner, v_mode, IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_lexp), 0),
                   TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now), v_owner = '' AND IFNULL(v_wanted > v_now, 0), 0;
            LEAVE proc;
        END IF;
        IF v_fresh AND v_sole THEN
            -- A new period, its reader recorded in the row.
            UPDATE dblock_locks SET owner = '', reentry = 1, version = v_version + 1, mode = 'read', acquired_at = v_now,
                expires_at = v_now + INTERVAL p_ttl_us MICROSECOND, shared_until = NULL, metadata = p_metadata,
                reader = p_owner, updated_at = v_now, next_owner = NULL, next_since = NULL, next_until = NULL
            WHERE name = p_name;
            COMMIT;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 1, v_version + 1, '', '', 0, 0, 0, p_ttl_us;
            LEAVE proc;
        END IF;
        IF NOT v_fresh AND v_owner = '' AND v_reader = p_owner THEN
            -- The recorded reader enters again.
            UPDATE dblock_locks SET reentry = reentry + 1,
                expires_at = GREATEST(expires_at, v_now + INTERVAL p_ttl_us MICROSECOND), updated_at = v_now
            WHERE name = p_name;
            COMMIT;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 1, v_version, '', '', 0, 0, 0, p_ttl_us;
            LEAVE proc;
        END IF;
        IF NOT v_fresh AND v_owner = '' AND v_reader IS NOT NULL THEN
            -- A second reader: the recorded one moves into dblock_shares, its lease unchanged.
            INSERT INTO dblock_shares (name, owner, token, reentry, acquired_at, expires_at, metadata)
            VALUES (p_name, v_reader, v_version, v_reentry, v_acq, v_lexp, v_meta)
            ON DUPLICATE KEY UPDATE token = VALUES(token), reentry = VALUES(reentry), acquired_at = VALUES(acquired_at),
                expires_at = VALUES(expires_at), metadata = VALUES(metadata);
            UPDATE dblock_locks SET reader = NULL, reentry = 1, metadata = NULL WHERE name = p_name;
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
            expires_at = v_exp, shared_until = NULL, metadata = NULL, reader = NULL, updated_at = v_now,
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

DROP PROCEDURE IF EXISTS dblock_acquire_read;

-- +goose StatementBegin
CREATE PROCEDURE dblock_acquire_read(IN p_name VARBINARY(255), IN p_owner VARBINARY(255), IN p_ttl_us BIGINT,
                                      IN p_metadata VARCHAR(1024) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
MODIFIES SQL DATA
proc: BEGIN
    DECLARE v_saved_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
    DECLARE v_now, v_exp, v_lexp, v_wanted, v_next_until DATETIME(6);
    DECLARE v_version, v_tok BIGINT;
    DECLARE v_owner, v_next, v_reader VARBINARY(255);
    DECLARE v_acq DATETIME(6);
    DECLARE v_meta VARCHAR(1024) CHARACTER SET utf8mb4;
    DECLARE v_reentry INT;
    DECLARE v_sole INT DEFAULT 1;
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
        SELECT l.version, IFNULL(l.owner, ''), l.owner IS NULL, l.expires_at, l.wanted_until, l.next_owner, l.next_until, l.reader
        INTO v_version, v_owner, v_free, v_lexp, v_wanted, v_next, v_next_until, v_reader
        FROM dblock_locks l WHERE l.name = p_name;
        IF v_version IS NOT NULL AND (v_free OR v_lexp <= v_now)
           AND NOT IFNULL(v_next_until > v_now AND NOT (v_next <=> p_owner), FALSE) THEN
            -- Begin a period: the update takes the row only as read (its version), free or expired
            -- and not kept for another owner. A row lock waited for leaves the clock of before the
            -- wait: the period ends no later than it would have. Its reader is recorded in the row
            -- (v_sole), or gets a share below.
            UPDATE dblock_locks SET owner = '', reentry = 1, version = v_version + 1, mode = 'read', acquired_at = v_now,
                expires_at = v_now + INTERVAL p_ttl_us MICROSECOND, shared_until = NULL, updated_at = v_now,
                metadata = IF(v_sole, p_metadata, NULL), reader = IF(v_sole, p_owner, NULL),
                next_owner = NULL, next_since = NULL, next_until = NULL
            WHERE name = p_name AND version = v_version AND (owner IS NULL OR expires_at <= v_now)
              AND NOT IFNULL(next_until > v_now AND NOT (next_owner <=> p_owner), FALSE);
            IF ROW_COUNT() = 1 THEN
                -- v_owner says what the row holds now (readers), no longer the expired holder read.
                SET v_begun = 1, v_owner = '', v_tok = v_version + 1, v_exp = v_now + INTERVAL p_ttl_us MICROSECOND;
                IF v_sole THEN
                    COMMIT;
                    SET SESSION innodb_lock_wait_timeout = v_saved_wait;
                    SELECT 1, v_tok, '', '', 0, 0, 0, p_ttl_us;
                    LEAVE proc;
                END IF;
                LEAVE attempt;
            END IF;
        END IF;
        -- Joined without the row's lock: only a period whose readers are all in dblock_shares.
        SET v_join = IFNULL(v_version IS NOT NULL AND NOT v_free AND v_owner = '' AND v_reader IS NULL
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
            WHERE l.name = p_name AND l.owner = '' AND l.reader IS NULL
              AND l.expires_at > v_now + INTERVAL (p_ttl_us DIV 2) MICROSECOND
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
               l.next_owner, l.next_until, l.reader, l.reentry, l.acquired_at, l.metadata
        INTO v_version, v_owner, v_free, v_mode, v_lexp, v_wanted, v_next, v_next_until, v_reader, v_reentry, v_acq, v_meta
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
            SET v_mine = v_mine OR v_reader <=> p_owner;
        END IF;
        IF NOT v_fresh AND v_owner <> p_owner AND (v_owner <> '' OR (IFNULL(v_wanted > v_now, 0) AND NOT v_mine)) THEN
            ROLLBACK;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 0, v_version, v_owner, v_mode, IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_lexp), 0),
                   TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', v_now), v_owner = '' AND IFNULL(v_wanted > v_now, 0), 0;
            LEAVE proc;
        END IF;
        IF v_fresh AND v_sole THEN
            -- A new period, its reader recorded in the row.
            UPDATE dblock_locks SET owner = '', reentry = 1, version = v_version + 1, mode = 'read', acquired_at = v_now,
                expires_at = v_now + INTERVAL p_ttl_us MICROSECOND, shared_until = NULL, metadata = p_metadata,
                reader = p_owner, updated_at = v_now, next_owner = NULL, next_since = NULL, next_until = NULL
            WHERE name = p_name;
            COMMIT;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 1, v_version + 1, '', '', 0, 0, 0, p_ttl_us;
            LEAVE proc;
        END IF;
        IF NOT v_fresh AND v_owner = '' AND v_reader = p_owner THEN
            -- The recorded reader enters again.
            UPDATE dblock_locks SET reentry = reentry + 1,
                expires_at = GREATEST(expires_at, v_now + INTERVAL p_ttl_us MICROSECOND), updated_at = v_now
            WHERE name = p_name;
            COMMIT;
            SET SESSION innodb_lock_wait_timeout = v_saved_wait;
            SELECT 1, v_version, '', '', 0, 0, 0, p_ttl_us;
            LEAVE proc;
        END IF;
        IF NOT v_fresh AND v_owner = '' AND v_reader IS NOT NULL THEN
            -- A second reader: the recorded one moves into dblock_shares, its lease unchanged.
            INSERT INTO dblock_shares (name, owner, token, reentry, acquired_at, expires_at, metadata)
            VALUES (p_name, v_reader, v_version, v_reentry, v_acq, v_lexp, v_meta)
            ON DUPLICATE KEY UPDATE token = VALUES(token), reentry = VALUES(reentry), acquired_at = VALUES(acquired_at),
                expires_at = VALUES(expires_at), metadata = VALUES(metadata);
            UPDATE dblock_locks SET reader = NULL, reentry = 1, metadata = NULL WHERE name = p_name;
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
            expires_at = v_exp, shared_until = NULL, metadata = NULL, reader = NULL, updated_at = v_now,
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
    -- The recorded reader: one entry given up, or the name freed, in one update (the assignments
    -- run in order: reentry's last, as the others read the count before it).
    UPDATE dblock_locks SET owner = IF(reentry > 1, owner, NULL), reader = IF(reentry > 1, reader, NULL),
        expires_at = IF(reentry > 1, expires_at, NULL), metadata = IF(reentry > 1, metadata, NULL),
        updated_at = UTC_TIMESTAMP(6), reentry = IF(reentry > 1, reentry - 1, 0)
    WHERE name = p_name AND owner = '' AND reader = p_owner AND version = p_token;
    IF ROW_COUNT() = 1 THEN
        COMMIT;
        SET SESSION innodb_lock_wait_timeout = v_saved_wait;
        SELECT 1;
        LEAVE proc;
    END IF;
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


-- A history trigger installed before records the recorded reader too.
SET @dblock_history_on = (SELECT COUNT(*) FROM information_schema.triggers
    WHERE trigger_schema = DATABASE() AND trigger_name = 'dblock_history_ended' AND event_object_table = 'dblock_locks');
SET @dblock_stmt = IF(@dblock_history_on > 0, 'DROP TRIGGER dblock_history_ended', 'DO 0');
PREPARE dblock_stmt FROM @dblock_stmt;
EXECUTE dblock_stmt;
-- +goose StatementBegin
SET @dblock_stmt = IF(@dblock_history_on > 0, 'CREATE TRIGGER dblock_history_ended AFTER UPDATE ON dblock_locks FOR EACH ROW
IF OLD.owner IS NOT NULL AND (OLD.owner <> '''' OR OLD.reader IS NOT NULL) AND (NOT (NEW.owner <=> OLD.owner) OR NEW.version <> OLD.version) THEN
    INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
    VALUES (OLD.name, IF(OLD.owner = '''', OLD.reader, OLD.owner), OLD.version, OLD.mode, OLD.acquired_at, UTC_TIMESTAMP(6),
        CASE WHEN NEW.owner = '''' AND NEW.version = OLD.version THEN ''released''
             WHEN NEW.owner IS NOT NULL AND NEW.owner <> OLD.owner THEN ''taken_over''
             WHEN NEW.owner IS NULL AND NEW.mode IS NULL THEN ''force_released''
             WHEN OLD.expires_at <= UTC_TIMESTAMP(6) THEN ''expired''
             ELSE ''released'' END,
        OLD.metadata);
END IF', 'DO 0');
-- +goose StatementEnd
PREPARE dblock_stmt FROM @dblock_stmt;
EXECUTE dblock_stmt;
DEALLOCATE PREPARE dblock_stmt;

-- +goose Down
-- The recorded readers become shares, as 00014-00023 keep every reader.
INSERT INTO dblock_shares (name, owner, token, reentry, acquired_at, expires_at, metadata)
SELECT name, reader, version, reentry, acquired_at, expires_at, metadata FROM dblock_locks
WHERE owner = '' AND reader IS NOT NULL
ON DUPLICATE KEY UPDATE token = VALUES(token), reentry = VALUES(reentry), acquired_at = VALUES(acquired_at),
    expires_at = VALUES(expires_at), metadata = VALUES(metadata);
UPDATE dblock_locks SET reader = NULL, reentry = 1, metadata = NULL WHERE owner = '' AND reader IS NOT NULL;

SET @dblock_history_on = (SELECT COUNT(*) FROM information_schema.triggers
    WHERE trigger_schema = DATABASE() AND trigger_name = 'dblock_history_ended' AND event_object_table = 'dblock_locks');
SET @dblock_stmt = IF(@dblock_history_on > 0, 'DROP TRIGGER dblock_history_ended', 'DO 0');
PREPARE dblock_stmt FROM @dblock_stmt;
EXECUTE dblock_stmt;
-- +goose StatementBegin
SET @dblock_stmt = IF(@dblock_history_on > 0, 'CREATE TRIGGER dblock_history_ended AFTER UPDATE ON dblock_locks FOR EACH ROW
IF OLD.owner IS NOT NULL AND OLD.owner <> '''' AND (NOT (NEW.owner <=> OLD.owner) OR NEW.version <> OLD.version) THEN
    INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
    VALUES (OLD.name, OLD.owner, OLD.version, OLD.mode, OLD.acquired_at, UTC_TIMESTAMP(6),
        CASE WHEN NEW.owner = '''' AND NEW.version = OLD.version THEN ''released''
             WHEN NEW.owner IS NOT NULL AND NEW.owner <> OLD.owner THEN ''taken_over''
             WHEN NEW.owner IS NULL AND NEW.mode IS NULL THEN ''force_released''
             WHEN OLD.expires_at <= UTC_TIMESTAMP(6) THEN ''expired''
             ELSE ''released'' END,
        OLD.metadata);
END IF', 'DO 0');
-- +goose StatementEnd
PREPARE dblock_stmt FROM @dblock_stmt;
EXECUTE dblock_stmt;
DEALLOCATE PREPARE dblock_stmt;

DROP PROCEDURE IF EXISTS dblock_acquire_read;
DROP PROCEDURE IF EXISTS dblock_acquire_share;

-- 00022's procedure.
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

DROP PROCEDURE IF EXISTS dblock_release_share;

-- 00015's procedure.
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
