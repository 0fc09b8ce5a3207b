-- dblock: the history of acquisitions, one row per acquisition when it ends (opt-in).
-- The table is always there and stays empty until history is enabled (dblock history
-- --enable, or history.Enable), which adds the trigger on dblock_locks that writes it in the
-- statement that ends the acquisition; the reaper prunes it past a retention.
-- Times are integer microseconds since the Unix epoch (UTC).

-- +goose Up
CREATE TABLE dblock_history (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    mode        TEXT,
    acquired_at INTEGER,
    ended_at    INTEGER NOT NULL,
    ended_how   TEXT    NOT NULL,
    metadata    TEXT
);

CREATE INDEX dblock_history_name_idx ON dblock_history (name, ended_at);
CREATE INDEX dblock_history_ended_at_idx ON dblock_history (ended_at);

-- +goose Down
DROP TRIGGER IF EXISTS dblock_history_ended;
DROP TABLE dblock_history;
