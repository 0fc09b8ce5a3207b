-- dblock: dblock_lock_begin(name, shared) begins a transaction and locks the name's row in it,
-- without waiting, in one call: a MariaDB pessimistic hold on a pool dblock opened sends it in
-- place of START TRANSACTION and its first lock statement, so that a hold takes two round trips
-- (this call and the checked commit, migration 00018) where a hand-written one takes three. It
-- answers the lock statement's seven columns (owner, mode, expiry µs, clock µs, connection id,
-- @@server_id, the session's hold bound), or no row for a name without one; a row another
-- transaction holds fails it at once with error 1205, the transaction begun. shared locks the row
-- in share mode (a shared hold).
--
-- MySQL 8 creates it and does not call it (its holds begin as before): the parts in /*M! */
-- comments are MariaDB's (MySQL 8 reads them as comments), and MySQL's hold bound is its
-- wait_timeout.

-- +goose Up
-- +goose StatementBegin
CREATE PROCEDURE dblock_lock_begin(IN p_name VARBINARY(255), IN p_shared BOOLEAN)
SQL SECURITY INVOKER
READS SQL DATA
BEGIN
    START TRANSACTION;
    IF p_shared THEN
        /*M! SET STATEMENT innodb_lock_wait_timeout = 0 FOR */
        SELECT IFNULL(owner, ''), IFNULL(mode, ''),
               IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at), 0),
               TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)), CONNECTION_ID(), @@server_id,
               COALESCE(/*M! @@SESSION.idle_transaction_timeout, */ @@SESSION.wait_timeout)
        FROM dblock_locks WHERE name = p_name LOCK IN SHARE MODE;
    ELSE
        /*M! SET STATEMENT innodb_lock_wait_timeout = 0 FOR */
        SELECT IFNULL(owner, ''), IFNULL(mode, ''),
               IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at), 0),
               TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)), CONNECTION_ID(), @@server_id,
               COALESCE(/*M! @@SESSION.idle_transaction_timeout, */ @@SESSION.wait_timeout)
        FROM dblock_locks WHERE name = p_name FOR UPDATE;
    END IF;
END
-- +goose StatementEnd

-- +goose Down
DROP PROCEDURE IF EXISTS dblock_lock_begin;
