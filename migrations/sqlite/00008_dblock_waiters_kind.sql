-- dblock: what each waiter of the queue waits for, so that one queue serves the fair modes of
-- every lock: 'exclusive' (fairqueue, and rwlock's fair writers) waits for every waiter ahead of
-- it; 'read' (rwlock's fair readers) only for the waiters ahead that are not readers; 'semaphore'
-- (semaphore's fair grants) queues apart, behind the earlier grants of its semaphore only.

-- +goose Up
ALTER TABLE dblock_waiters ADD COLUMN kind TEXT NOT NULL DEFAULT 'exclusive';

-- +goose Down
ALTER TABLE dblock_waiters DROP COLUMN kind;
