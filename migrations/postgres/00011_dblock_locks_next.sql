-- dblock: a waiting exclusive acquirer may keep a name for itself once it is freed (optimistic
-- mode, and rwlock's writers): next_owner is the waiting owner, next_since when it began to
-- wait (by the database clock), next_until when the reservation lapses unless renewed. While the
-- reservation is live, a free or expired row is taken by that owner only (a holder's re-entry is
-- not affected); an owner that began waiting earlier may take the reservation over. So waiters in
-- different processes are served about in the order they began to wait, rather than the
-- releasing process's own next waiter, which it wakes at once, always winning.

-- +goose Up
ALTER TABLE dblock_locks
    ADD COLUMN next_owner text,
    ADD COLUMN next_since timestamptz,
    ADD COLUMN next_until timestamptz;

-- +goose Down
ALTER TABLE dblock_locks DROP COLUMN next_owner, DROP COLUMN next_since, DROP COLUMN next_until;
