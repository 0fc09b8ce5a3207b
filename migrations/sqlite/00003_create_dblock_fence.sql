-- dblock: the fencing-token floor (see the MySQL migration of the same name).

-- +goose Up
CREATE TABLE dblock_fence (
    id    INTEGER NOT NULL PRIMARY KEY,
    floor INTEGER NOT NULL
);
INSERT INTO dblock_fence (id, floor) VALUES (1, 0);

-- +goose Down
DROP TABLE dblock_fence;
