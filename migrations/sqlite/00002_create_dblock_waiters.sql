-- dblock: the fair-lock wait queue. A waiter may take a name only when it is the
-- oldest live waiter (created_at, then id); expires_at is its heartbeat deadline.

-- +goose Up
CREATE TABLE dblock_waiters (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL,
    owner        TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);

CREATE INDEX dblock_waiters_queue_idx ON dblock_waiters (name, created_at, id);
CREATE INDEX dblock_waiters_expires_at_idx ON dblock_waiters (expires_at);

-- +goose Down
DROP TABLE dblock_waiters;
