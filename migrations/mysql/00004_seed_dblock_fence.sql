-- +goose Up
INSERT INTO dblock_fence (id, floor) VALUES (1, 0);

-- +goose Down
DELETE FROM dblock_fence WHERE id = 1;
