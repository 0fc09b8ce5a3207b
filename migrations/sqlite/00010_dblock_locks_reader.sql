-- dblock: the column reader of dblock_locks, where PostgreSQL (its migration 00017) records a
-- name's only reader in the name's row rather than in dblock_shares. SQLite keeps every reader
-- in dblock_shares and leaves it NULL; the column is here so that the schema, and the
-- statements every database shares (the fair gate's), are the same. It is meaningful only
-- while owner is '' (a readers' period).

-- +goose Up
ALTER TABLE dblock_locks ADD COLUMN reader TEXT;

-- +goose Down
ALTER TABLE dblock_locks DROP COLUMN reader;
