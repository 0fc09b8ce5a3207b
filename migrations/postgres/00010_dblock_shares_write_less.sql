-- dblock: rwlock's readers write less (dblock_acquire_share and dblock_release_share of
-- 00005 and 00009, replaced). An acquisition that finds the name free or expired starts the
-- readers' period with one UPDATE of the name's row (which takes its lock, as the locking
-- read did), where it tried to join first, then read the row locked. A release deletes its
-- share in one statement (the entry count lowered instead only when the owner re-entered),
-- and leaves the name's row as it is while other readers hold the name and the period's end
-- stays where it was: readers who joined a running period share its end, so most releases
-- of one name's readers no longer write the row that every reader of the name locks. The
-- decisions are the same as before: its last entry deletes the share; when readers hold the
-- name at that token, the unexpired shares left are counted (none frees the name and
-- announces it; else the latest of them ends the period); an exclusive holder's own read
-- lease just ends. The release commits asynchronously, as a lease's release.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dblock_acquire_share(p_name text, p_owner text, p_ttl_us bigint, p_metadata text)
RETURNS TABLE (acquired boolean, token bigint, holder text, holder_mode text, expires_us bigint, now_us bigint,
               writer_waits boolean, granted_us bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r     record;
    ttl   interval := p_ttl_us * interval '1 microsecond';
    now_  timestamptz;
    fresh boolean;
    tok   bigint;
    exp   timestamptz;
BEGIN
    PERFORM set_config('lock_timeout', '100', true);
    now_ := clock_timestamp();
    UPDATE dblock_locks l SET owner = '', reentry = 1, version = nextval('dblock_token_seq'), mode = 'read',
        acquired_at = now_, expires_at = now_ + ttl, shared_until = NULL, metadata = NULL, updated_at = now_
    WHERE l.name = p_name AND (l.owner IS NULL OR l.expires_at <= now_)
    RETURNING l.version, l.expires_at INTO tok, exp;
    IF FOUND THEN
        INSERT INTO dblock_shares AS s (name, owner, token, reentry, acquired_at, expires_at, metadata)
        VALUES (p_name, p_owner, tok, 1, now_, exp, p_metadata)
        ON CONFLICT (name, owner) DO UPDATE SET reentry = 1, expires_at = excluded.expires_at,
            acquired_at = excluded.acquired_at, metadata = excluded.metadata, token = excluded.token;
        RETURN QUERY SELECT true, tok, ''::text, ''::text, 0::bigint, 0::bigint, false,
            ((extract(epoch FROM exp - now_)) * 1000000)::bigint;
        RETURN;
    END IF;
    SELECT l.version, l.expires_at INTO r FROM dblock_locks l
    WHERE l.name = p_name AND l.owner = '' AND l.expires_at > now_ + ttl / 2
      AND (l.wanted_until IS NULL OR l.wanted_until <= now_ OR EXISTS (
          SELECT 1 FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = l.version AND s.expires_at > now_))
    FOR SHARE OF l;
    IF FOUND THEN
        exp := least(now_ + ttl, r.expires_at);
        INSERT INTO dblock_shares AS s (name, owner, token, reentry, acquired_at, expires_at, metadata)
        VALUES (p_name, p_owner, r.version, 1, now_, exp, p_metadata)
        ON CONFLICT (name, owner) DO UPDATE SET
            reentry     = CASE WHEN s.token = excluded.token THEN s.reentry + 1 ELSE 1 END,
            expires_at  = CASE WHEN s.token = excluded.token THEN greatest(s.expires_at, excluded.expires_at) ELSE excluded.expires_at END,
            acquired_at = CASE WHEN s.token = excluded.token THEN s.acquired_at ELSE excluded.acquired_at END,
            metadata    = CASE WHEN s.token = excluded.token THEN s.metadata ELSE excluded.metadata END,
            token       = excluded.token
        RETURNING s.expires_at INTO exp;
        RETURN QUERY SELECT true, r.version, ''::text, ''::text, 0::bigint, 0::bigint, false,
            ((extract(epoch FROM least(exp, r.expires_at) - now_)) * 1000000)::bigint;
        RETURN;
    END IF;

    SELECT l.version, coalesce(l.owner, '') AS owner, l.owner IS NULL AS free, coalesce(l.mode, '') AS mode,
           l.expires_at, l.wanted_until, l.shared_until INTO r
    FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    IF NOT FOUND THEN
        INSERT INTO dblock_locks (name, reentry, version, updated_at)
        VALUES (p_name, 0, nextval('dblock_token_seq'), now_) ON CONFLICT (name) DO NOTHING;
        SELECT l.version, coalesce(l.owner, '') AS owner, l.owner IS NULL AS free, coalesce(l.mode, '') AS mode,
               l.expires_at, l.wanted_until, l.shared_until INTO r
        FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    END IF;
    now_ := clock_timestamp();
    fresh := r.free OR r.expires_at <= now_;
    IF NOT fresh AND r.owner <> p_owner AND (r.owner <> '' OR (coalesce(r.wanted_until > now_, false) AND NOT EXISTS (
          SELECT 1 FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = r.version AND s.expires_at > now_))) THEN
        RETURN QUERY SELECT false, r.version, r.owner, r.mode,
            coalesce(((extract(epoch FROM r.expires_at)) * 1000000)::bigint, 0), ((extract(epoch FROM now_)) * 1000000)::bigint,
            r.owner = '' AND coalesce(r.wanted_until > now_, false), 0::bigint;
        RETURN;
    END IF;
    tok := CASE WHEN fresh THEN nextval('dblock_token_seq') ELSE r.version END;
    INSERT INTO dblock_shares AS s (name, owner, token, reentry, acquired_at, expires_at, metadata)
    VALUES (p_name, p_owner, tok, 1, now_, now_ + ttl, p_metadata)
    ON CONFLICT (name, owner) DO UPDATE SET
        reentry     = CASE WHEN s.token = excluded.token THEN s.reentry + 1 ELSE 1 END,
        expires_at  = CASE WHEN s.token = excluded.token THEN greatest(s.expires_at, excluded.expires_at) ELSE excluded.expires_at END,
        acquired_at = CASE WHEN s.token = excluded.token THEN s.acquired_at ELSE excluded.acquired_at END,
        metadata    = CASE WHEN s.token = excluded.token THEN s.metadata ELSE excluded.metadata END,
        token       = excluded.token
    RETURNING s.expires_at INTO exp;
    IF fresh THEN
        UPDATE dblock_locks SET owner = '', reentry = 1, version = tok, mode = 'read', acquired_at = now_,
            expires_at = exp, shared_until = NULL, metadata = NULL, updated_at = now_
        WHERE name = p_name;
    ELSIF r.owner = '' THEN
        UPDATE dblock_locks SET expires_at = greatest(expires_at, exp), updated_at = now_
        WHERE name = p_name;
    ELSE
        UPDATE dblock_locks SET expires_at = greatest(expires_at, exp),
            shared_until = greatest(coalesce(shared_until, exp), exp), updated_at = now_
        WHERE name = p_name;
    END IF;
    RETURN QUERY SELECT true, tok, ''::text, ''::text, 0::bigint, 0::bigint, false,
        ((extract(epoch FROM exp - now_)) * 1000000)::bigint;
END
$fn$;
-- +goose StatementEnd

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
-- 00009's functions.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dblock_acquire_share(p_name text, p_owner text, p_ttl_us bigint, p_metadata text)
RETURNS TABLE (acquired boolean, token bigint, holder text, holder_mode text, expires_us bigint, now_us bigint,
               writer_waits boolean, granted_us bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r     record;
    ttl   interval := p_ttl_us * interval '1 microsecond';
    now_  timestamptz;
    fresh boolean;
    tok   bigint;
    exp   timestamptz;
BEGIN
    PERFORM set_config('lock_timeout', '100', true);
    now_ := clock_timestamp();
    SELECT l.version, l.expires_at INTO r FROM dblock_locks l
    WHERE l.name = p_name AND l.owner = '' AND l.expires_at > now_ + ttl / 2
      AND (l.wanted_until IS NULL OR l.wanted_until <= now_ OR EXISTS (
          SELECT 1 FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = l.version AND s.expires_at > now_))
    FOR SHARE OF l;
    IF FOUND THEN
        exp := least(now_ + ttl, r.expires_at);
        INSERT INTO dblock_shares AS s (name, owner, token, reentry, acquired_at, expires_at, metadata)
        VALUES (p_name, p_owner, r.version, 1, now_, exp, p_metadata)
        ON CONFLICT (name, owner) DO UPDATE SET
            reentry     = CASE WHEN s.token = excluded.token THEN s.reentry + 1 ELSE 1 END,
            expires_at  = CASE WHEN s.token = excluded.token THEN greatest(s.expires_at, excluded.expires_at) ELSE excluded.expires_at END,
            acquired_at = CASE WHEN s.token = excluded.token THEN s.acquired_at ELSE excluded.acquired_at END,
            metadata    = CASE WHEN s.token = excluded.token THEN s.metadata ELSE excluded.metadata END,
            token       = excluded.token
        RETURNING s.expires_at INTO exp;
        RETURN QUERY SELECT true, r.version, ''::text, ''::text, 0::bigint, 0::bigint, false,
            ((extract(epoch FROM least(exp, r.expires_at) - now_)) * 1000000)::bigint;
        RETURN;
    END IF;

    SELECT l.version, coalesce(l.owner, '') AS owner, l.owner IS NULL AS free, coalesce(l.mode, '') AS mode,
           l.expires_at, l.wanted_until, l.shared_until INTO r
    FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    IF NOT FOUND THEN
        INSERT INTO dblock_locks (name, reentry, version, updated_at)
        VALUES (p_name, 0, nextval('dblock_token_seq'), now_) ON CONFLICT (name) DO NOTHING;
        SELECT l.version, coalesce(l.owner, '') AS owner, l.owner IS NULL AS free, coalesce(l.mode, '') AS mode,
               l.expires_at, l.wanted_until, l.shared_until INTO r
        FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    END IF;
    now_ := clock_timestamp();
    fresh := r.free OR r.expires_at <= now_;
    IF NOT fresh AND r.owner <> p_owner AND (r.owner <> '' OR (coalesce(r.wanted_until > now_, false) AND NOT EXISTS (
          SELECT 1 FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = r.version AND s.expires_at > now_))) THEN
        RETURN QUERY SELECT false, r.version, r.owner, r.mode,
            coalesce(((extract(epoch FROM r.expires_at)) * 1000000)::bigint, 0), ((extract(epoch FROM now_)) * 1000000)::bigint,
            r.owner = '' AND coalesce(r.wanted_until > now_, false), 0::bigint;
        RETURN;
    END IF;
    tok := CASE WHEN fresh THEN nextval('dblock_token_seq') ELSE r.version END;
    INSERT INTO dblock_shares AS s (name, owner, token, reentry, acquired_at, expires_at, metadata)
    VALUES (p_name, p_owner, tok, 1, now_, now_ + ttl, p_metadata)
    ON CONFLICT (name, owner) DO UPDATE SET
        reentry     = CASE WHEN s.token = excluded.token THEN s.reentry + 1 ELSE 1 END,
        expires_at  = CASE WHEN s.token = excluded.token THEN greatest(s.expires_at, excluded.expires_at) ELSE excluded.expires_at END,
        acquired_at = CASE WHEN s.token = excluded.token THEN s.acquired_at ELSE excluded.acquired_at END,
        metadata    = CASE WHEN s.token = excluded.token THEN s.metadata ELSE excluded.metadata END,
        token       = excluded.token
    RETURNING s.expires_at INTO exp;
    IF fresh THEN
        UPDATE dblock_locks SET owner = '', reentry = 1, version = tok, mode = 'read', acquired_at = now_,
            expires_at = exp, shared_until = NULL, metadata = NULL, updated_at = now_
        WHERE name = p_name;
    ELSIF r.owner = '' THEN
        UPDATE dblock_locks SET expires_at = greatest(expires_at, exp), updated_at = now_
        WHERE name = p_name;
    ELSE
        UPDATE dblock_locks SET expires_at = greatest(expires_at, exp),
            shared_until = greatest(coalesce(shared_until, exp), exp), updated_at = now_
        WHERE name = p_name;
    END IF;
    RETURN QUERY SELECT true, tok, ''::text, ''::text, 0::bigint, 0::bigint, false,
        ((extract(epoch FROM exp - now_)) * 1000000)::bigint;
END
$fn$;
-- +goose StatementEnd

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
