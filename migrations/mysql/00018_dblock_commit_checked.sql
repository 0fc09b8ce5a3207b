-- dblock: dblock_commit_checked() commits the transaction in progress or, when the server has
-- ended it (a deadlock victim's rollback, an implicit commit), commits nothing and fails with
-- error 1644 and the message "dblock: the transaction is not open on the server". MariaDB
-- pessimistic holds on a pool dblock opened commit with it: it does what the anonymous block
-- that they sent as COMMIT did (store.MariaDBCheckedCommit, still sent where this procedure is
-- missing), but the server compiles a procedure once per session, and the block on every commit
-- (about 30 µs per transaction of one client, measured with mysqlslap). MySQL 8 does not use it.

-- +goose Up
-- +goose StatementBegin
CREATE PROCEDURE dblock_commit_checked()
SQL SECURITY INVOKER
BEGIN
    IF @@in_transaction = 1 THEN
        COMMIT;
    ELSE
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'dblock: the transaction is not open on the server';
    END IF;
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE IF EXISTS dblock_commit_checked;
