-- dblock: a reader's release (dblock_release_share of 00005, 00009) writes less. It deletes
-- its share in one statement (the entry count read first only when the owner re-entered),
-- and leaves the name's row as it is while other readers hold the name and the period's end
-- stays where it was: readers who joined a running period share its end, so most releases
-- of one name's readers no longer write the row that every reader of the name locks. The
-- decisions are the same as before: its last entry deletes the share; when readers hold the
-- name at that token, the unexpired shares left are counted (none frees the name and
-- announces it; else the latest of them ends the period); an exclusive holder's own read
-- lease just ends. The release commits asynchronously, as a lease's release.

-- +goose Up
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

-- +goose Down
-- 00009's function.
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
    PERFORM set_config('lock_timeout', '100', true);
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT l.version, l.owner, l.expires_at INTO r FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    SELECT s.reentry INTO n FROM dblock_shares s
    WHERE s.name = p_name AND s.owner = p_owner AND s.token = p_token AND s.reentry > 0 FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF n > 1 THEN
        UPDATE dblock_shares SET reentry = reentry - 1 WHERE name = p_name AND owner = p_owner;
        RETURN true;
    END IF;
    DELETE FROM dblock_shares WHERE name = p_name AND owner = p_owner;
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
    ELSE
        UPDATE dblock_locks SET expires_at = last, updated_at = now_ WHERE name = p_name;
    END IF;
    RETURN true;
END
$fn$;
-- +goose StatementEnd
