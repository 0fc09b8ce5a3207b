-- dblock: a semaphore per name with its limit; its permits are in dblock_permits.

-- +goose Up
CREATE TABLE dblock_semaphores (
    name       VARBINARY(255) NOT NULL,
    lim        INT            NOT NULL,
    updated_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (name),
    CONSTRAINT dblock_semaphores_lim CHECK (lim > 0)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE dblock_semaphores;
