-- dblock: one row per lock name, shared by every mode.
-- VARBINARY names compare byte for byte (no collation, no trailing-space padding).
-- Times are UTC (UTC_TIMESTAMP(6)), whatever the session time zone.

-- +goose Up
CREATE TABLE dblock_locks (
    name        VARBINARY(255) NOT NULL,
    owner       VARBINARY(255) NULL,
    reentry     INT            NOT NULL DEFAULT 0,
    version     BIGINT         NOT NULL,
    mode        VARCHAR(16)    NULL,
    acquired_at DATETIME(6)    NULL,
    expires_at  DATETIME(6)    NULL,
    updated_at  DATETIME(6)    NOT NULL,
    metadata    VARCHAR(1024)  NULL,
    PRIMARY KEY (name),
    KEY dblock_locks_expires_at_idx (expires_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE dblock_locks;
