-- dblock: a name's only reader is recorded in the name's row (new column reader), with no row
-- of dblock_shares: its acquisition is one update of the row, its release another, as an
-- exclusive lease's are. A readers' period that a second reader joins moves the first into
-- dblock_shares (the row's reentry, acquired_at, expires_at and metadata become its share's)
-- and goes on as before. Until then a read pair wrote two rows each way (the row and the
-- share) where an exclusive pair writes one.
--
-- reader is meaningful only while owner is '' (a readers' period): every statement that makes
-- owner '' sets it (a reader's begin: its owner or NULL; an exclusive holder's hand-off to
-- readers: NULL), and a statement that takes the row from readers may leave it as it was.
-- While reader is set, the row's reentry is that reader's count, its acquired_at and metadata
-- its own, and no share of the period exists.
--
-- dblock_acquire_share gains a fifth argument, p_sole: true records a reader that begins a
-- period in the row (what this version's clients ask); the four-argument function of earlier
-- clients, kept, asks false and so writes a share as before, and every release, renewal and
-- listing of an earlier client finds its shares where it looks. Either form moves a recorded
-- reader into dblock_shares when it joins the period. dblock_release_share releases a
-- recorded reader with one update of the row (freeing and announcing the name in the same
-- statement, or giving up one entry) and otherwise goes on as in 00013. A history trigger
-- installed by `dblock history enable` is replaced so that it records a recorded reader's
-- acquisition when it ends.

-- +goose Up
-- Adding the column is instant, but waits for the table's lock: give up after 3 s rather than
-- queue every lock statement behind a long pessimistic transaction (run it again).
SET LOCAL lock_timeout = '3s';
ALTER TABLE dblock_locks ADD COLUMN reader text;

-- +goose StatementBegin
CREATE FUNCTION dblock_acquire_share(p_name text, p_owner text, p_ttl_us bigint, p_metadata text, p_sole boolean)
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
    -- A free or expired name: a new period, its only reader recorded in the row (p_sole).
    UPDATE dblock_locks l SET owner = '', reentry = 1, version = nextval('dblock_token_seq'), mode = 'read',
        acquired_at = now_, expires_at = now_ + ttl, shared_until = NULL, updated_at = now_,
        metadata = CASE WHEN p_sole THEN p_metadata END, reader = CASE WHEN p_sole THEN p_owner END,
        next_owner = NULL, next_since = NULL, next_until = NULL
    WHERE l.name = p_name AND (l.owner IS NULL OR l.expires_at <= now_)
      AND (l.next_until IS NULL OR l.next_until <= now_ OR l.next_owner = p_owner)
    RETURNING l.version, l.expires_at INTO tok, exp;
    IF FOUND THEN
        IF NOT p_sole THEN
            INSERT INTO dblock_shares AS s (name, owner, token, reentry, acquired_at, expires_at, metadata)
            VALUES (p_name, p_owner, tok, 1, now_, exp, p_metadata)
            ON CONFLICT (name, owner) DO UPDATE SET reentry = 1, expires_at = excluded.expires_at,
                acquired_at = excluded.acquired_at, metadata = excluded.metadata, token = excluded.token;
        END IF;
        RETURN QUERY SELECT true, tok, ''::text, ''::text, 0::bigint, 0::bigint, false,
            ((extract(epoch FROM exp - now_)) * 1000000)::bigint;
        RETURN;
    END IF;
    -- Joining without the row's lock: only a period whose readers are all in dblock_shares.
    SELECT l.version, l.expires_at INTO r FROM dblock_locks l
    WHERE l.name = p_name AND l.owner = '' AND l.reader IS NULL AND l.expires_at > now_ + ttl / 2
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
           l.expires_at, l.wanted_until, l.shared_until, l.next_owner, l.next_until,
           l.reader, l.reentry, l.acquired_at, l.metadata INTO r
    FROM dblock_locks l WHERE l.name = p_name FOR NO KEY UPDATE OF l;
    IF NOT FOUND THEN
        INSERT INTO dblock_locks (name, reentry, version, updated_at)
        VALUES (p_name, 0, nextval('dblock_token_seq'), now_) ON CONFLICT (name) DO NOTHING;
        SELECT l.version, coalesce(l.owner, '') AS owner, l.owner IS NULL AS free, coalesce(l.mode, '') AS mode,
               l.expires_at, l.wanted_until, l.shared_until, l.next_owner, l.next_until,
               l.reader, l.reentry, l.acquired_at, l.metadata INTO r
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
    IF NOT fresh AND r.owner <> p_owner AND (r.owner <> '' OR (coalesce(r.wanted_until > now_, false)
          AND r.reader IS DISTINCT FROM p_owner AND NOT EXISTS (
          SELECT 1 FROM dblock_shares s WHERE s.name = p_name AND s.owner = p_owner AND s.token = r.version AND s.expires_at > now_))) THEN
        RETURN QUERY SELECT false, r.version, r.owner, r.mode,
            coalesce(((extract(epoch FROM r.expires_at)) * 1000000)::bigint, 0), ((extract(epoch FROM now_)) * 1000000)::bigint,
            r.owner = '' AND coalesce(r.wanted_until > now_, false), 0::bigint;
        RETURN;
    END IF;
    IF fresh AND p_sole THEN
        UPDATE dblock_locks SET owner = '', reentry = 1, version = nextval('dblock_token_seq'), mode = 'read',
            acquired_at = now_, expires_at = now_ + ttl, shared_until = NULL, metadata = p_metadata, reader = p_owner,
            updated_at = now_, next_owner = NULL, next_since = NULL, next_until = NULL
        WHERE name = p_name
        RETURNING version, expires_at INTO tok, exp;
        RETURN QUERY SELECT true, tok, ''::text, ''::text, 0::bigint, 0::bigint, false,
            ((extract(epoch FROM exp - now_)) * 1000000)::bigint;
        RETURN;
    END IF;
    IF NOT fresh AND r.owner = '' AND r.reader = p_owner THEN
        -- The recorded reader enters again.
        UPDATE dblock_locks SET reentry = reentry + 1, expires_at = greatest(expires_at, now_ + ttl), updated_at = now_
        WHERE name = p_name
        RETURNING expires_at INTO exp;
        RETURN QUERY SELECT true, r.version, ''::text, ''::text, 0::bigint, 0::bigint, false,
            ((extract(epoch FROM exp - now_)) * 1000000)::bigint;
        RETURN;
    END IF;
    IF NOT fresh AND r.owner = '' AND r.reader IS NOT NULL THEN
        -- A second reader: the recorded one moves into dblock_shares, its lease unchanged.
        INSERT INTO dblock_shares AS s (name, owner, token, reentry, acquired_at, expires_at, metadata)
        VALUES (p_name, r.reader, r.version, r.reentry, r.acquired_at, r.expires_at, r.metadata)
        ON CONFLICT (name, owner) DO UPDATE SET token = excluded.token, reentry = excluded.reentry,
            acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, metadata = excluded.metadata;
        UPDATE dblock_locks SET reader = NULL, reentry = 1, metadata = NULL WHERE name = p_name;
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
            expires_at = exp, shared_until = NULL, metadata = NULL, reader = NULL, updated_at = now_,
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

-- The earlier clients' form: a reader's lease is always a share.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dblock_acquire_share(p_name text, p_owner text, p_ttl_us bigint, p_metadata text)
RETURNS TABLE (acquired boolean, token bigint, holder text, holder_mode text, expires_us bigint, now_us bigint,
               writer_waits boolean, granted_us bigint)
LANGUAGE sql AS $fn$
    SELECT * FROM dblock_acquire_share(p_name, p_owner, p_ttl_us, p_metadata, false)
$fn$;
-- +goose StatementEnd

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

-- A history trigger installed before (dblock history enable) records the recorded reader too.
-- +goose StatementBegin
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'dblock_history_ended' AND tgrelid = 'dblock_locks'::regclass) THEN
        CREATE OR REPLACE FUNCTION dblock_history_record() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
            VALUES (OLD.name, CASE WHEN OLD.owner = '' THEN OLD.reader ELSE OLD.owner END, OLD.version, OLD.mode, OLD.acquired_at,
                clock_timestamp(), CASE WHEN NEW.owner = '' AND NEW.version = OLD.version THEN 'released'
                     WHEN NEW.owner IS NOT NULL AND NEW.owner <> OLD.owner THEN 'taken_over'
                     WHEN NEW.owner IS NULL AND NEW.mode IS NULL THEN 'force_released'
                     WHEN OLD.expires_at <= clock_timestamp() THEN 'expired'
                     ELSE 'released' END, OLD.metadata);
            RETURN NULL;
        END
        $$;
        DROP TRIGGER dblock_history_ended ON dblock_locks;
        CREATE TRIGGER dblock_history_ended AFTER UPDATE ON dblock_locks FOR EACH ROW
        WHEN (OLD.owner IS NOT NULL AND (OLD.owner <> '' OR OLD.reader IS NOT NULL) AND (NEW.owner IS DISTINCT FROM OLD.owner OR NEW.version <> OLD.version))
        EXECUTE FUNCTION dblock_history_record();
    END IF;
END
$do$;
-- +goose StatementEnd

-- +goose Down
-- The recorded readers become shares, as 00005-00016 keep every reader.
INSERT INTO dblock_shares AS s (name, owner, token, reentry, acquired_at, expires_at, metadata)
SELECT name, reader, version, reentry, acquired_at, expires_at, metadata FROM dblock_locks
WHERE owner = '' AND reader IS NOT NULL
ON CONFLICT (name, owner) DO UPDATE SET token = excluded.token, reentry = excluded.reentry,
    acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, metadata = excluded.metadata;
UPDATE dblock_locks SET reentry = 1, metadata = NULL WHERE owner = '' AND reader IS NOT NULL;

-- +goose StatementBegin
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'dblock_history_ended' AND tgrelid = 'dblock_locks'::regclass) THEN
        CREATE OR REPLACE FUNCTION dblock_history_record() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO dblock_history (name, owner, token, mode, acquired_at, ended_at, ended_how, metadata)
            VALUES (OLD.name, OLD.owner, OLD.version, OLD.mode, OLD.acquired_at, clock_timestamp(),
                CASE WHEN NEW.owner = '' AND NEW.version = OLD.version THEN 'released'
                     WHEN NEW.owner IS NOT NULL AND NEW.owner <> OLD.owner THEN 'taken_over'
                     WHEN NEW.owner IS NULL AND NEW.mode IS NULL THEN 'force_released'
                     WHEN OLD.expires_at <= clock_timestamp() THEN 'expired'
                     ELSE 'released' END, OLD.metadata);
            RETURN NULL;
        END
        $$;
        DROP TRIGGER dblock_history_ended ON dblock_locks;
        CREATE TRIGGER dblock_history_ended AFTER UPDATE ON dblock_locks FOR EACH ROW
        WHEN (OLD.owner IS NOT NULL AND OLD.owner <> '' AND (NEW.owner IS DISTINCT FROM OLD.owner OR NEW.version <> OLD.version))
        EXECUTE FUNCTION dblock_history_record();
    END IF;
END
$do$;
-- +goose StatementEnd

-- 00015's function.
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

DROP FUNCTION dblock_acquire_share(text, text, bigint, text, boolean);

-- 00013's function, with 00014's setting.
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

SET LOCAL lock_timeout = '3s';
ALTER TABLE dblock_locks DROP COLUMN reader;
