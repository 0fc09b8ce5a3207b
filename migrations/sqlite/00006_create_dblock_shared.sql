-- dblock: shared locks (see the PostgreSQL migration of the same name for the model).
-- Times are integer microseconds since the Unix epoch (UTC). Permit ids use AUTOINCREMENT,
-- so an id is never given twice (they are the permits' tokens).

-- +goose Up
ALTER TABLE dblock_locks ADD COLUMN shared_until INTEGER;
ALTER TABLE dblock_locks ADD COLUMN wanted_until INTEGER;

CREATE TABLE dblock_shares (
    name        TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    reentry     INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    metadata    TEXT,
    PRIMARY KEY (name, owner)
);

CREATE INDEX dblock_shares_expires_at_idx ON dblock_shares (expires_at);

CREATE TABLE dblock_semaphores (
    name       TEXT    NOT NULL PRIMARY KEY,
    lim        INTEGER NOT NULL CHECK (lim > 0),
    updated_at INTEGER NOT NULL
);

CREATE TABLE dblock_permits (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    permits     INTEGER NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    metadata    TEXT
);

CREATE INDEX dblock_permits_name_idx ON dblock_permits (name, expires_at);
CREATE INDEX dblock_permits_expires_at_idx ON dblock_permits (expires_at);

-- +goose Down
DROP TABLE dblock_permits;
DROP TABLE dblock_semaphores;
DROP TABLE dblock_shares;
ALTER TABLE dblock_locks DROP COLUMN wanted_until;
ALTER TABLE dblock_locks DROP COLUMN shared_until;
