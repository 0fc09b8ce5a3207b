-- dblock: one row per lock name, shared by every mode.
-- Times are integer microseconds since the Unix epoch (UTC).

-- +goose Up
CREATE TABLE dblock_locks (
    name        TEXT    NOT NULL PRIMARY KEY,
    owner       TEXT,
    reentry     INTEGER NOT NULL DEFAULT 0,
    version     INTEGER NOT NULL,
    mode        TEXT,
    acquired_at INTEGER,
    expires_at  INTEGER,
    updated_at  INTEGER NOT NULL,
    metadata    TEXT,
    CHECK (length(CAST(name AS BLOB)) BETWEEN 1 AND 255),
    CHECK ((owner IS NULL) = (reentry = 0))
);

CREATE INDEX dblock_locks_expires_at_idx ON dblock_locks (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP TABLE dblock_locks;
