-- dblock: the last slot (nominal firing time) each scheduled job ran for (package schedule).

-- +goose Up
CREATE TABLE dblock_slots (
    job        VARBINARY(255) NOT NULL,
    last_slot  DATETIME(6)    NOT NULL,
    updated_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (job)
) ENGINE=InnoDB;

-- +goose Down
DROP TABLE dblock_slots;
