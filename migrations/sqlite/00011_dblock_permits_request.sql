-- dblock: each grant of a semaphore's permits records the request that made it (column
-- request: an id the client draws at random for each attempt), so that a client whose answer
-- was lost reads its grant back and keeps it (see the PostgreSQL migration of the same name).

-- +goose Up
ALTER TABLE dblock_permits ADD COLUMN request TEXT;

-- +goose Down
ALTER TABLE dblock_permits DROP COLUMN request;
