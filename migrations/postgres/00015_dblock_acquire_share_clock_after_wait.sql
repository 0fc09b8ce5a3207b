-- dblock: a reader joins the readers' period only if the period still lasts long enough by the
-- clock read after the row lock (dblock_acquire_share of 00012, replaced; MySQL's migration 00019
-- alike). The fast join path read the clock, then took the name's row FOR SHARE: when another
-- transaction held the row (a user's own lock of it) across the period's end and then ended without
-- changing the row, the server did not evaluate the WHERE again, and the reader joined a period that
-- had run out during the wait, and was told it held for the rest of it, while an exclusive acquirer
-- could take the name. The function bounds its lock waits at 100 ms, so only TTLs under 200 ms were
-- exposed. A join refused after the wait goes on to the slow path, which locks the row FOR NO KEY
-- UPDATE (the share lock upgraded; two such upgrades at once end in the lock timeout, a refusal the
-- caller retries) and reads the clock after its lock.

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
    joins boolean := false;
BEGIN
    PERFORM set_config('lock_timeout', '100', true);
    now_ := clock_timestamp();
    UPDATE dblock_locks l SET owner = '', reentry = 1, version = nextval('dblock_token_seq'), mode = 'read',
        acquired_at = now_, expires_at = now_ + ttl, shared_until = NULL, metadata = NULL, updated_at = now_,
        next_owner = NULL, next_since = NULL, next_until = NULL
    WHERE l.name = p_name AND (l.owner IS NULL OR l.expires_at <= now_)
      AND (l.next_until IS NULL OR l.next_until <= now_ OR l.next_owner = p_owner)
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
        -- The WHERE ran on the clock before the row lock's wait: the period must still last after it.
        now_ := clock_timestamp();
        joins := r.expires_at > now_ + ttl / 2;
    END IF;
    IF joins THEN
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
           l.expires_at, l.wanted_until, l.shared_until, l.next_owner, l.next_until INTO r
    FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    IF NOT FOUND THEN
        INSERT INTO dblock_locks (name, reentry, version, updated_at)
        VALUES (p_name, 0, nextval('dblock_token_seq'), now_) ON CONFLICT (name) DO NOTHING;
        SELECT l.version, coalesce(l.owner, '') AS owner, l.owner IS NULL AS free, coalesce(l.mode, '') AS mode,
               l.expires_at, l.wanted_until, l.shared_until, l.next_owner, l.next_until INTO r
        FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    END IF;
    now_ := clock_timestamp();
    fresh := r.free OR r.expires_at <= now_;
    IF fresh AND r.next_until > now_ AND r.next_owner <> p_owner THEN
        RETURN QUERY SELECT false, r.version, r.next_owner, ''::text,
            ((extract(epoch FROM r.next_until)) * 1000000)::bigint, ((extract(epoch FROM now_)) * 1000000)::bigint,
            false, 0::bigint;
        RETURN;
    END IF;
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
            expires_at = exp, shared_until = NULL, metadata = NULL, updated_at = now_,
            next_owner = NULL, next_since = NULL, next_until = NULL
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


-- +goose Down
-- 00012's function.
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
        acquired_at = now_, expires_at = now_ + ttl, shared_until = NULL, metadata = NULL, updated_at = now_,
        next_owner = NULL, next_since = NULL, next_until = NULL
    WHERE l.name = p_name AND (l.owner IS NULL OR l.expires_at <= now_)
      AND (l.next_until IS NULL OR l.next_until <= now_ OR l.next_owner = p_owner)
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
           l.expires_at, l.wanted_until, l.shared_until, l.next_owner, l.next_until INTO r
    FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    IF NOT FOUND THEN
        INSERT INTO dblock_locks (name, reentry, version, updated_at)
        VALUES (p_name, 0, nextval('dblock_token_seq'), now_) ON CONFLICT (name) DO NOTHING;
        SELECT l.version, coalesce(l.owner, '') AS owner, l.owner IS NULL AS free, coalesce(l.mode, '') AS mode,
               l.expires_at, l.wanted_until, l.shared_until, l.next_owner, l.next_until INTO r
        FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    END IF;
    now_ := clock_timestamp();
    fresh := r.free OR r.expires_at <= now_;
    IF fresh AND r.next_until > now_ AND r.next_owner <> p_owner THEN
        RETURN QUERY SELECT false, r.version, r.next_owner, ''::text,
            ((extract(epoch FROM r.next_until)) * 1000000)::bigint, ((extract(epoch FROM now_)) * 1000000)::bigint,
            false, 0::bigint;
        RETURN;
    END IF;
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
            expires_at = exp, shared_until = NULL, metadata = NULL, updated_at = now_,
            next_owner = NULL, next_since = NULL, next_until = NULL
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

