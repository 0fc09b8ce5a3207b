-- dblock: a fair waiter counts the live waiters ahead of it with an index scan that marks the
-- entries of deleted waiters dead, never with a bitmap scan (as 00014 did for the readers'
-- release).
--
-- Every fair acquisition (fairqueue's, and rwlock's and semaphore's with the fair option)
-- inserts a row of dblock_waiters and deletes it when it takes the name (or gives up), and the
-- entry in dblock_waiters_queue_idx stays until a vacuum. A waiter's check counts the live
-- waiters of its name ahead of it (name = $1 and an earlier created_at), and for that the
-- planner picks a bitmap scan, which never marks an entry dead: every check revisited every
-- waiter the name had had since the last vacuum (with 8,000 of them, a check took 2.1-2.8 ms;
-- on a name contended by 8 goroutines its checks took 0.47 ms after 500 hand-offs and 1.35 ms
-- after 8,000). With bitmap scans off, the count is an index scan, which marks the entries of
-- rows dead to every transaction as it passes them, and the next scan (a bitmap scan of another
-- statement too) skips them. The setting is the function's own (restored when it returns).
--
-- dblock_queue_ahead(name, kind, created_at, id) returns how many live waiters of name ahead of
-- the position (created_at, id) are in the way of a waiter of kind (the same space, a
-- semaphore's or the lock's, and not two readers: store.gateConflict), and the heartbeat
-- deadline of the nearest of them (NULL when none). STRICT: a NULL position (no such waiter)
-- reads nothing and returns NULLs.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION dblock_queue_ahead(p_name text, p_kind text, p_created_at timestamptz, p_id bigint,
                                   OUT ahead bigint, OUT ahead_expires_at timestamptz)
LANGUAGE plpgsql STABLE STRICT
SET enable_bitmapscan = off
AS $fn$
BEGIN
    SELECT count(*) INTO ahead FROM dblock_waiters w
    WHERE w.name = p_name AND (w.created_at, w.id) < (p_created_at, p_id)
      AND w.expires_at > now()
      AND (w.kind = 'semaphore') = (p_kind = 'semaphore') AND (p_kind <> 'read' OR w.kind <> 'read');
    IF ahead > 0 THEN
        SELECT w.expires_at INTO ahead_expires_at FROM dblock_waiters w
        WHERE w.name = p_name AND (w.created_at, w.id) < (p_created_at, p_id)
          AND w.expires_at > now()
          AND (w.kind = 'semaphore') = (p_kind = 'semaphore') AND (p_kind <> 'read' OR w.kind <> 'read')
        ORDER BY w.created_at DESC, w.id DESC
        LIMIT 1;
    END IF;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION dblock_queue_ahead(text, text, timestamptz, bigint);
