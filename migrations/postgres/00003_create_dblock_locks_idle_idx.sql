-- dblock: an index for the reaper's idle scan (owner IS NULL AND updated_at <= ...), which
-- otherwise reads the whole table on every pass once it holds many rows. Partial: only
-- free rows are in it.
--
-- Built in the migration's transaction, not CONCURRENTLY: writes to dblock_locks wait while
-- it is built (under a second for a million rows), but the build starts within the lock
-- timeout below or fails (run the migration again). CREATE INDEX CONCURRENTLY would instead
-- wait for every transaction open in the database to end, including pessimistic locks held
-- for hours.

-- +goose Up
SET LOCAL lock_timeout = '3s';
CREATE INDEX dblock_locks_idle_idx ON dblock_locks (updated_at) WHERE owner IS NULL;

-- +goose Down
DROP INDEX dblock_locks_idle_idx;
