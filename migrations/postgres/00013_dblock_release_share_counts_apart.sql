-- dblock: a reader's release no longer locks the name's row while other readers stay
-- (dblock_release_share of 00010, replaced). In 00010 every release locked the row first, so
-- each waited for the readers joining the period (whose share lock a row lock waits for), and
-- they for it: readers of one name queued behind each other.
--
-- Now an owner that re-entered gives up one entry first, with nothing else locked. A share's
-- last entry is given up under a transaction-level advisory lock of the name (classid
-- 1684171883, 'dblk'; objid hashtext(name)), which releasers of one name take one after
-- another, so the last of them sees every earlier one's delete when it counts what is left.
-- Under it, the name's row is locked only when no unexpired share of another owner reaches the
-- period's end (one statement decides both); a release that finds such a share deletes its
-- own and is done, writing no other row and waiting for no joining reader. A release that
-- locked the row decides as in 00010: the shares left counted, the name freed (and announced,
-- in the same statement) or the period ended with the last share, an exclusive holder's own
-- read lease cleared. The advisory lock is always taken before the row lock, and ends with the
-- transaction.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dblock_release_share(p_name text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r      record;
    n      integer;
    last   timestamptz;
    now_   timestamptz;
    locked boolean;
BEGIN
    PERFORM set_config('lock_timeout', '100', true), set_config('synchronous_commit', 'off', true);
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

-- +goose Down
-- 00010's function.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dblock_release_share(p_name text, p_owner text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r    record;
    n    integer;
    last timestamptz;
    now_ timestamptz;
BEGIN
    PERFORM set_config('lock_timeout', '100', true), set_config('synchronous_commit', 'off', true);
    SELECT l.version, l.owner, l.expires_at INTO r FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    DELETE FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry = 1;
    IF NOT FOUND THEN
        UPDATE dblock_shares s SET reentry = s.reentry - 1
        WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry > 1;
        RETURN FOUND;
    END IF;
    now_ := clock_timestamp();
    IF r.version IS DISTINCT FROM p_token OR r.expires_at <= now_ THEN
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
        WHERE name = p_name;
        PERFORM pg_notify('dblock', p_name);
    ELSIF last < r.expires_at THEN
        UPDATE dblock_locks SET expires_at = last, updated_at = now_ WHERE name = p_name;
    END IF;
    RETURN true;
END
$fn$;
-- +goose StatementEnd
