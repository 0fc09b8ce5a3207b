-- dblock: each reader's own lease on a name (see 00007).

-- +goose Up
CREATE TABLE dblock_shares (
    name        VARBINARY(255) NOT NULL,
    owner       VARBINARY(255) NOT NULL,
    token       BIGINT         NOT NULL,
    reentry     INT            NOT NULL,
    acquired_at DATETIME(6)    NOT NULL,
    expires_at  DATETIME(6)    NOT NULL,
    metadata    VARCHAR(1024)  CHARACTER SET utf8mb4 NULL,
    PRIMARY KEY (name, owner),
    KEY dblock_shares_expires_at_idx (expires_at)
) ENGINE=InnoDB DEFAULT CHARACTER SET utf8mb4;

-- +goose Down
DROP TABLE dblock_shares;
