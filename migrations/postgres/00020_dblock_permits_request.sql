-- dblock: each grant of a semaphore's permits records the request that made it (column
-- request: an id the client draws at random for each attempt), so that a client whose answer
-- was lost (its connection broke after the grant committed) reads its grant back and keeps
-- it, rather than leaving its permits out until the grant expires. dblock_grant_permits is
-- migration 00007's dblock_acquire_permits with the request as a seventh argument, recorded with
-- the grant; dblock_acquire_permits stays for clients of earlier versions, whose grants record
-- none.

-- +goose Up
ALTER TABLE dblock_permits ADD COLUMN request text;

-- +goose StatementBegin
CREATE FUNCTION dblock_grant_permits(p_name text, p_owner text, p_limit integer, p_permits integer,
                                     p_ttl_us bigint, p_metadata text, p_request text)
RETURNS TABLE (granted boolean, token bigint, lim integer, used bigint, next_us bigint, now_us bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    l    integer;
    n    bigint;
    nxt  timestamptz;
    tok  bigint;
    now_ timestamptz;
BEGIN
    UPDATE dblock_semaphores s SET updated_at = clock_timestamp() WHERE s.name = p_name RETURNING s.lim INTO l;
    IF NOT FOUND THEN
        INSERT INTO dblock_semaphores (name, lim, updated_at) VALUES (p_name, p_limit, clock_timestamp())
        ON CONFLICT (name) DO NOTHING;
        UPDATE dblock_semaphores s SET updated_at = clock_timestamp() WHERE s.name = p_name RETURNING s.lim INTO l;
    END IF;
    now_ := clock_timestamp();
    IF l IS DISTINCT FROM p_limit THEN
        RETURN QUERY SELECT false, 0::bigint, coalesce(l, 0), 0::bigint, 0::bigint,
            (extract(epoch FROM now_) * 1000000)::bigint;
        RETURN;
    END IF;
    SELECT coalesce(sum(p.permits), 0), min(p.expires_at) INTO n, nxt
    FROM dblock_permits p WHERE p.name = p_name AND p.expires_at > now_;
    IF n + p_permits > l THEN
        RETURN QUERY SELECT false, 0::bigint, l, n, coalesce((extract(epoch FROM nxt) * 1000000)::bigint, 0),
            (extract(epoch FROM now_) * 1000000)::bigint;
        RETURN;
    END IF;
    INSERT INTO dblock_permits (name, owner, permits, acquired_at, expires_at, metadata, request)
    VALUES (p_name, p_owner, p_permits, now_, now_ + p_ttl_us * interval '1 microsecond', p_metadata, p_request)
    RETURNING id INTO tok;
    RETURN QUERY SELECT true, tok, l, n + p_permits, 0::bigint, (extract(epoch FROM now_) * 1000000)::bigint;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS dblock_grant_permits(text, text, integer, integer, bigint, text, text);
ALTER TABLE dblock_permits DROP COLUMN request;
