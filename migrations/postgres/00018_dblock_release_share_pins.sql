-- dblock: a reader's release waits for the other releasers of its name only when it may be the
-- last reader. Until now every release of a share with one entry first took the name's
-- transaction-level advisory lock (00013), so the releasers of one name ran one at a time, each
-- holding the lock to its commit: with 32 readers of one name a release took five times as long
-- as an acquisition. Now, in a period whose end another reader's share reaches, the release
-- deletes its share and row-locks one such share of another reader until its commit (FOR NO KEY
-- UPDATE SKIP LOCKED, as MySQL migration 00023 does): that share cannot be deleted before this
-- release has committed, so the name stays held by a live reader and the period's end stays
-- right without the name's row. A share another transaction holds (a release in progress: its
-- delete locks it) is skipped, so two releasers never keep each other's shares. A release that
-- finds none to lock goes on as before (its share already deleted): under the advisory lock it
-- counts the readers left, after every other such release has committed; a release that locked
-- a share committed before that share's owner can delete it. So the last release to commit sees
-- no reader left and frees the name.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dblock_release_share(p_name text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
SET enable_bitmapscan = off
AS $fn$
#variable_conflict use_column
DECLARE
    r      record;
    n      integer;
    last   timestamptz;
    now_   timestamptz;
    locked boolean;
    dropped boolean := false;
BEGIN
    PERFORM set_config('lock_timeout', '100', true), set_config('synchronous_commit', 'off', true);
    -- The recorded reader: one entry given up, or the name freed and announced, in one statement.
    UPDATE dblock_locks l SET
        reentry    = CASE WHEN l.reentry > 1 THEN l.reentry - 1 ELSE 0 END,
        owner      = CASE WHEN l.reentry > 1 THEN l.owner END,
        reader     = CASE WHEN l.reentry > 1 THEN l.reader END,
        expires_at = CASE WHEN l.reentry > 1 THEN l.expires_at END,
        metadata   = CASE WHEN l.reentry > 1 THEN l.metadata END,
        updated_at = clock_timestamp()
    WHERE l.name = p_name AND l.owner = '' AND l.reader = p_owner AND l.version = p_token
    RETURNING (CASE WHEN l.reentry = 0 THEN pg_notify('dblock', p_name)::text END) INTO r;
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE dblock_shares s SET reentry = s.reentry - 1
    WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry > 1;
    IF FOUND THEN
        RETURN true;
    END IF;
    -- A share of a period that another reader's share reaches the end of: this one deleted, and
    -- one such share of another reader row-locked until the commit (skipping any share another
    -- transaction holds: a release in progress), so it outlives this release and the period's
    -- end stays right without the name's row, and without waiting for the other releasers.
    now_ := clock_timestamp();
    SELECT l.version, l.owner, l.expires_at INTO r FROM dblock_locks l WHERE l.name = p_name;
    IF FOUND AND r.owner = '' AND r.version = p_token AND r.expires_at > now_ THEN
        DELETE FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry = 1;
        IF NOT FOUND THEN
            -- Re-entered since the first look, or no such share.
            UPDATE dblock_shares s SET reentry = s.reentry - 1
            WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry > 1;
            RETURN FOUND;
        END IF;
        dropped := true;
        PERFORM 1 FROM dblock_shares s
        WHERE s.name = p_name AND s.token = p_token AND s.owner <> p_owner AND s.expires_at >= r.expires_at
        LIMIT 1 FOR NO KEY UPDATE OF s SKIP LOCKED;
        IF FOUND THEN
            RETURN true;
        END IF;
        -- Every such share is being released, or none is left: this share stays deleted, and
        -- the count below decides, as for any other release.
    END IF;
    -- Releasers of one name count what is left one at a time.
    PERFORM pg_advisory_xact_lock(1684171883, hashtext(p_name));
    now_ := clock_timestamp();
    -- The row is locked unless readers of other owners hold the name to the period's end.
    SELECT l.version, l.owner, l.expires_at INTO r FROM dblock_locks l
    WHERE l.name = p_name AND NOT (l.owner = '' AND l.version = p_token AND l.expires_at > now_ AND coalesce((
        SELECT max(s.expires_at) FROM dblock_shares s
        WHERE s.name = p_name AND s.token = p_token AND s.owner <> p_owner AND s.expires_at > now_) >= l.expires_at, false))
    FOR NO KEY UPDATE OF l;
    locked := FOUND;
    IF NOT dropped THEN
        DELETE FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry = 1;
        IF NOT FOUND THEN
            -- Re-entered since the first look.
            UPDATE dblock_shares s SET reentry = s.reentry - 1
            WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry > 1;
            RETURN FOUND;
        END IF;
    END IF;
    now_ := clock_timestamp();
    IF NOT locked OR r.version IS DISTINCT FROM p_token OR r.expires_at <= now_ THEN
        RETURN true;
    END IF;
    IF r.owner = p_owner THEN
        UPDATE dblock_locks SET shared_until = NULL, updated_at = now_ WHERE name = p_name;
        RETURN true;
    END IF;
    IF r.owner IS NULL OR r.owner <> '' THEN
        RETURN true;
    END IF;
    SELECT count(*), max(s.expires_at) INTO n, last FROM dblock_shares s
    WHERE s.name = p_name AND s.token = p_token AND s.expires_at > now_;
    IF n = 0 THEN
        UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = now_
        WHERE name = p_name
        RETURNING pg_notify('dblock', p_name) INTO r; -- One statement: the row freed and announced.
    ELSIF last < r.expires_at THEN
        UPDATE dblock_locks SET expires_at = last, updated_at = now_ WHERE name = p_name;
    END IF;
    RETURN true;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dblock_release_share(p_name text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
SET enable_bitmapscan = off
AS $fn$
#variable_conflict use_column
DECLARE
    r      record;
    n      integer;
    last   timestamptz;
    now_   timestamptz;
    locked boolean;
BEGIN
    PERFORM set_config('lock_timeout', '100', true), set_config('synchronous_commit', 'off', true);
    -- The recorded reader: one entry given up, or the name freed and announced, in one statement.
    UPDATE dblock_locks l SET
        reentry    = CASE WHEN l.reentry > 1 THEN l.reentry - 1 ELSE 0 END,
        owner      = CASE WHEN l.reentry > 1 THEN l.owner END,
        reader     = CASE WHEN l.reentry > 1 THEN l.reader END,
        expires_at = CASE WHEN l.reentry > 1 THEN l.expires_at END,
        metadata   = CASE WHEN l.reentry > 1 THEN l.metadata END,
        updated_at = clock_timestamp()
    WHERE l.name = p_name AND l.owner = '' AND l.reader = p_owner AND l.version = p_token
    RETURNING (CASE WHEN l.reentry = 0 THEN pg_notify('dblock', p_name)::text END) INTO r;
    IF FOUND THEN
        RETURN true;
    END IF;
    UPDATE dblock_shares s SET reentry = s.reentry - 1
    WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry > 1;
    IF FOUND THEN
        RETURN true;
    END IF;
    -- Releasers of one name count what is left one at a time.
    PERFORM pg_advisory_xact_lock(1684171883, hashtext(p_name));
    now_ := clock_timestamp();
    -- The row is locked unless readers of other owners hold the name to the period's end.
    SELECT l.version, l.owner, l.expires_at INTO r FROM dblock_locks l
    WHERE l.name = p_name AND NOT (l.owner = '' AND l.version = p_token AND l.expires_at > now_ AND coalesce((
        SELECT max(s.expires_at) FROM dblock_shares s
        WHERE s.name = p_name AND s.token = p_token AND s.owner <> p_owner AND s.expires_at > now_) >= l.expires_at, false))
    FOR NO KEY UPDATE OF l;
    locked := FOUND;
    DELETE FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry = 1;
    IF NOT FOUND THEN
        -- Re-entered since the first look.
        UPDATE dblock_shares s SET reentry = s.reentry - 1
        WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry > 1;
        RETURN FOUND;
    END IF;
    now_ := clock_timestamp();
    IF NOT locked OR r.version IS DISTINCT FROM p_token OR r.expires_at <= now_ THEN
        RETURN true;
    END IF;
    IF r.owner = p_owner THEN
        UPDATE dblock_locks SET shared_until = NULL, updated_at = now_ WHERE name = p_name;
        RETURN true;
    END IF;
    IF r.owner IS NULL OR r.owner <> '' THEN
        RETURN true;
    END IF;
    SELECT count(*), max(s.expires_at) INTO n, last FROM dblock_shares s
    WHERE s.name = p_name AND s.token = p_token AND s.expires_at > now_;
    IF n = 0 THEN
        UPDATE dblock_locks SET owner = NULL, reentry = 0, expires_at = NULL, updated_at = now_
        WHERE name = p_name
        RETURNING pg_notify('dblock', p_name) INTO r; -- One statement: the row freed and announced.
    ELSIF last < r.expires_at THEN
        UPDATE dblock_locks SET expires_at = last, updated_at = now_ WHERE name = p_name;
    END IF;
    RETURN true;
END
$fn$;
-- +goose StatementEnd
