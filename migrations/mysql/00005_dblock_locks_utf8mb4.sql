-- dblock: the text columns of dblock_locks in utf8mb4, whatever the server's default
-- character set when the table was created (upstream MariaDB 10 defaults to latin1, which
-- refuses or mangles metadata outside it, such as a host or command name in UTF-8).
-- name and owner are VARBINARY and stay so. One statement: MySQL DDL is not transactional.

-- +goose Up
ALTER TABLE dblock_locks
    DEFAULT CHARACTER SET utf8mb4,
    MODIFY mode     VARCHAR(16)   CHARACTER SET utf8mb4 NULL,
    MODIFY metadata VARCHAR(1024) CHARACTER SET utf8mb4 NULL;

-- +goose Down
-- Nothing to undo: utf8mb4 holds everything the columns' former character set did, and
-- that set is not recorded anywhere to go back to.
