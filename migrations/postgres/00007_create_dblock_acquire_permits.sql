-- dblock: a semaphore's grant in one round trip (see AcquirePermits in
-- internal/store/semaphore.go). The function locks the semaphore's row (creating it with the
-- caller's limit when missing), then counts the permits of the unexpired grants with a
-- statement of its own, which sees every grant committed before the lock was had (one
-- statement's snapshot could not: it would over-grant), and inserts the grant when they leave
-- room. A caller naming another limit is answered with the semaphore's own, granted nothing.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION dblock_acquire_permits(p_name text, p_owner text, p_limit integer, p_permits integer,
                                       p_ttl_us bigint, p_metadata text)
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
    INSERT INTO dblock_permits (name, owner, permits, acquired_at, expires_at, metadata)
    VALUES (p_name, p_owner, p_permits, now_, now_ + p_ttl_us * interval '1 microsecond', p_metadata)
    RETURNING id INTO tok;
    RETURN QUERY SELECT true, tok, l, n + p_permits, 0::bigint, (extract(epoch FROM now_) * 1000000)::bigint;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS dblock_acquire_permits(text, text, integer, integer, bigint, text);
