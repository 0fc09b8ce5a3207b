package store

// pgLeaseHandOver is LeaseSQL.HandOver: the release of the lease ($1 name,
// $2 owner, $3 token) that makes the name, in the same statement, the
// lease of owner $4 (TTL µs $5, mode $6, metadata $7) when the release
// frees it (cur.hand: the holder's last entry, no readers' period, no live
// reservation of an owner other than $4, $4 not the releasing owner) and
// no other transaction holds the row (excl, FOR UPDATE SKIP LOCKED, as a
// take locks it: see pgHandOver, the fair queue's hand-off, whose
// statement this is without the queue's rows). Handed, the row is taken as
// pgTakeUpd takes it, the commit is durable (an acquisition), and nothing
// is announced: the releasing Locker's line waits for the name, and other
// processes' waiters would only be refused (lineRows, in optimistic).
// Released only, it is Release with quiet set: asynchronous, announced to
// another owner's reservation alone (the fourth column then names that
// owner), or to every listener when readers take the name over.
var pgLeaseHandOver = `WITH excl AS (
    SELECT name FROM dblock_locks WHERE name = $1 AND owner = $2 AND version = $3
    FOR UPDATE SKIP LOCKED
), cur AS (
    SELECT name, (reentry = 1 AND $4 <> $2 AND NOT coalesce(shared_until > now(), false)
        AND NOT coalesce(next_until > now() AND next_owner <> $4, false)
        AND EXISTS (SELECT 1 FROM excl)) AS hand
    FROM dblock_locks WHERE name = $1 AND owner = $2 AND version = $3
    FOR NO KEY UPDATE
), upd AS (
    ` + pgHandUpd("$4", "$5", "$6", "$7") + `
    RETURNING cur.hand, l.version, l.reentry, CASE
        WHEN cur.hand THEN ''
        WHEN set_config('synchronous_commit', 'off', true) IS NULL THEN ''
        WHEN l.reentry = 0 AND ` + pgKeptForOther + ` THEN
            pg_notify('` + NotifyChannel + `', l.name || E'\x1f' || l.next_owner)::text || l.next_owner
        WHEN l.owner = '' THEN pg_notify('` + NotifyChannel + `', l.name)::text
        ELSE '' END AS kept
)
SELECT hand, version, reentry, kept FROM upd`
