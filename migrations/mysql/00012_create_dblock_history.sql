-- dblock: the history of acquisitions, one row per acquisition when it ends (opt-in).
-- The table is always there and stays empty until history is enabled (dblock history
-- --enable, or history.Enable), which adds the trigger on dblock_locks that writes it in the
-- statement that ends the acquisition; the reaper prunes it past a retention. MariaDB only:
-- MySQL 8 keeps no history (see the history package), and the table stays empty there.

-- +goose Up
CREATE TABLE dblock_history (
    id          BIGINT         NOT NULL AUTO_INCREMENT,
    name        VARBINARY(255) NOT NULL,
    owner       VARBINARY(255) NOT NULL,
    token       BIGINT         NOT NULL,
    mode        VARCHAR(16)    CHARACTER SET utf8mb4 NULL,
    acquired_at DATETIME(6)    NULL,
    ended_at    DATETIME(6)    NOT NULL,
    ended_how   VARCHAR(16)    CHARACTER SET utf8mb4 NOT NULL,
    metadata    VARCHAR(1024)  CHARACTER SET utf8mb4 NULL,
    PRIMARY KEY (id),
    KEY dblock_history_name_idx (name, ended_at),
    KEY dblock_history_ended_at_idx (ended_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TRIGGER IF EXISTS dblock_history_ended;
DROP TRIGGER IF EXISTS dblock_history_share_ended;
DROP TRIGGER IF EXISTS dblock_history_share_replaced;
DROP TRIGGER IF EXISTS dblock_history_grant_ended;
DROP TABLE dblock_history;
