-- dblock: a name's row records until when some Locker's waiter listens for its release (new
-- column listened_until, by the database clock). The release of an exclusive lease announces the
-- name (pg_notify) only while that is live, or when it hands the name to readers, or to a
-- reservation's owner. Announcing every release serialised every releasing commit on the
-- server's notification lock whether or not anybody listened: about a fifth of the server's
-- work for a release at 32 concurrent clients.
--
-- A Locker's wake-up hub sets the column when one of its calls starts to wait for the name's
-- release (before that call asks again), and renews it while any of its calls waits; a mark
-- nobody renews lapses by itself. Clients before this version never set it, and their releases
-- still announce every name; this version's waiters do not depend on them.

-- +goose Up
-- Adding the column is instant, but waits for the table's lock: give up after 3 s rather than
-- queue every lock statement behind a long pessimistic transaction (run it again).
SET LOCAL lock_timeout = '3s';
ALTER TABLE dblock_locks ADD COLUMN listened_until timestamptz;

-- +goose Down
SET LOCAL lock_timeout = '3s';
ALTER TABLE dblock_locks DROP COLUMN listened_until;
