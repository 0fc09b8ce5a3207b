-- dblock: an index for the reaper's idle scan (owner IS NULL AND updated_at <= ...), which
-- otherwise reads the whole table on every pass once it holds many rows. Built online
-- (in place, without blocking writes to dblock_locks). One statement per file: MySQL DDL
-- is not transactional.

-- +goose Up
CREATE INDEX dblock_locks_idle_idx ON dblock_locks (owner, updated_at) ALGORITHM=INPLACE LOCK=NONE;

-- +goose Down
DROP INDEX dblock_locks_idle_idx ON dblock_locks;
