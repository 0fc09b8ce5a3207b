-- dblock: the last slot (nominal firing time) each scheduled job ran for (package schedule):
-- a slot runs at most once across replicas, whatever their clocks, because claiming it is a
-- compare-and-set on last_slot.

-- +goose Up
CREATE TABLE dblock_slots (
    job        text        NOT NULL PRIMARY KEY,
    last_slot  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT dblock_slots_job_len CHECK (octet_length(job) BETWEEN 1 AND 255)
);

-- +goose Down
DROP TABLE dblock_slots;
