-- dblock: shared locks (see the PostgreSQL migration 00005 for the model): the columns of
-- dblock_locks that readers use. One statement per file: MySQL DDL is not transactional.

-- +goose Up
ALTER TABLE dblock_locks
    ADD COLUMN shared_until DATETIME(6) NULL,
    ADD COLUMN wanted_until DATETIME(6) NULL;

-- +goose Down
ALTER TABLE dblock_locks DROP COLUMN wanted_until, DROP COLUMN shared_until;
