-- dblock: an index for the reaper's idle scan (owner IS NULL AND updated_at <= ...), which
-- otherwise reads the whole table on every pass once it holds many rows. Partial: only
-- free rows are in it.

-- +goose Up
CREATE INDEX dblock_locks_idle_idx ON dblock_locks (updated_at) WHERE owner IS NULL;

-- +goose Down
DROP INDEX dblock_locks_idle_idx;
