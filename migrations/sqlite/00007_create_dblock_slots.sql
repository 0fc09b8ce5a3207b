-- dblock: the last slot each scheduled job ran for (see the PostgreSQL migration of the same
-- name). Times are integer microseconds since the Unix epoch (UTC).

-- +goose Up
CREATE TABLE dblock_slots (
    job        TEXT    NOT NULL PRIMARY KEY,
    last_slot  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE dblock_slots;
