-- dblock: the fair-lock wait queue. A waiter may take a name only when it is the
-- oldest live waiter (created_at, then id); expires_at is its heartbeat deadline.

-- +goose Up
CREATE TABLE dblock_waiters (
    id           BIGINT         NOT NULL AUTO_INCREMENT,
    name         VARBINARY(255) NOT NULL,
    owner        VARBINARY(255) NOT NULL,
    created_at   DATETIME(6)    NOT NULL,
    heartbeat_at DATETIME(6)    NOT NULL,
    expires_at   DATETIME(6)    NOT NULL,
    PRIMARY KEY (id),
    KEY dblock_waiters_queue_idx (name, created_at, id),
    KEY dblock_waiters_expires_at_idx (expires_at)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE dblock_waiters;
