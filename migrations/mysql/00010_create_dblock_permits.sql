-- dblock: one row per leased grant of a semaphore's permits; its id is the grant's token.

-- +goose Up
CREATE TABLE dblock_permits (
    id          BIGINT         NOT NULL AUTO_INCREMENT,
    name        VARBINARY(255) NOT NULL,
    owner       VARBINARY(255) NOT NULL,
    permits     INT            NOT NULL,
    acquired_at DATETIME(6)    NOT NULL,
    expires_at  DATETIME(6)    NOT NULL,
    metadata    VARCHAR(1024)  CHARACTER SET utf8mb4 NULL,
    PRIMARY KEY (id),
    KEY dblock_permits_name_idx (name, expires_at),
    KEY dblock_permits_expires_at_idx (expires_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE dblock_permits;
