-- dblock: the fencing-token floor. When the reaper deletes idle lock rows it raises
-- floor to their highest version in the same transaction; a new row starts above it,
-- so tokens stay strictly increasing per name across deletions.

-- +goose Up
CREATE TABLE dblock_fence (
    id    INT    NOT NULL,
    floor BIGINT NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE dblock_fence;
