package store

// pgHandOver is QueueSQL.HandOver: the release of the lease ($1 name, $2
// owner, $3 token) that hands the name, in the same statement, to waiter $4
// (owner $5, TTL µs $6, mode $7, metadata $8) when that waiter is live and
// first in the queue (alive, seen: the check of pgTakeHead) and the release
// frees the name for it (cur: the holder's last entry, no readers' period,
// no other owner's live reservation, and excl: no other transaction holds
// the row). me locks the waiter's row, so a reaper's delete or the waiter's
// own leave either waits for the hand-off or has won and nothing is handed.
// excl locks the row FOR UPDATE, as a take does (pgLease.Acquire's cur),
// where a hand-off may follow: cur's FOR NO KEY UPDATE, which the release
// needs, and the update itself pass a pessimistic shared hold's FOR KEY
// SHARE, which may hold the name once the lease ran out, and a hand-off
// then would overlap it. So while another transaction holds the row (SKIP
// LOCKED) nothing is handed. When nothing is handed, the row is released
// as pgLease.Release does (quiet false). Handed, the row is taken as
// pgTakeUpd takes it for $5, the waiter's row is deleted (del), the commit
// is durable (an acquisition), and the name is announced while a waiter
// elsewhere has marked it (listened_until): they count the hand-off as the
// release it also is. Released only, the commit is asynchronous, as the
// release's (the set_config of note's first branch after the hand-off's).
// The fourth column, note, is read and dropped so that it is evaluated.
// No row: the lease was not held.
var pgHandOver = `WITH alive AS (
    SELECT id, created_at FROM dblock_waiters
    WHERE id = $4 AND name = $1 AND owner = $5 AND owner <> $2 AND expires_at > now()
), seen AS (
    SELECT me.id FROM alive me WHERE ` + pgNoneAhead + `
), me AS (
    SELECT id FROM dblock_waiters WHERE id = $4 AND expires_at > now() AND EXISTS (SELECT 1 FROM seen)
    FOR UPDATE
), excl AS (
    SELECT name FROM dblock_locks WHERE name = $1 AND owner = $2 AND version = $3 AND EXISTS (SELECT 1 FROM me)
    FOR UPDATE SKIP LOCKED
), cur AS (
    SELECT name, (reentry = 1 AND NOT coalesce(shared_until > now(), false)
        AND NOT coalesce(next_until > now() AND next_owner <> $5, false)
        AND EXISTS (SELECT 1 FROM me) AND EXISTS (SELECT 1 FROM excl)) AS hand
    FROM dblock_locks WHERE name = $1 AND owner = $2 AND version = $3
    FOR NO KEY UPDATE
), upd AS (
    ` + pgHandUpd("$5", "$6", "$7", "$8") + `
    RETURNING cur.hand, l.version, l.reentry, CASE
        WHEN cur.hand THEN CASE WHEN l.listened_until > now() THEN pg_notify('` + NotifyChannel + `', l.name)::text END
        WHEN set_config('synchronous_commit', 'off', true) IS NULL THEN NULL
        WHEN l.reentry = 0 AND ` + pgKeptForOther + ` THEN pg_notify('` + NotifyChannel + `', l.name || E'\x1f' || l.next_owner)::text
        WHEN l.owner = '' OR (l.reentry = 0 AND l.listened_until > now()) THEN pg_notify('` + NotifyChannel + `', l.name)::text
        END AS note
), del AS (
    DELETE FROM dblock_waiters w USING me WHERE w.id = me.id AND EXISTS (SELECT 1 FROM upd WHERE upd.hand)
)
SELECT hand, version, reentry, coalesce(note, '') FROM upd`

// pgHandUpd is the update of the hand-offs' upd CTE (pgHandOver,
// pgLeaseHandOver): the row cur locked taken for owner (when cur.hand:
// the TTL in µs, mode and metadata given, the reservation cleared when it
// was owner's or ran out) as pgTakeUpd takes it, or else released as
// pgLease.Release releases it. The arguments are the statement's
// placeholders for those four.
func pgHandUpd(owner, ttl, mode, metadata string) string {
	return `UPDATE dblock_locks l SET
        reentry      = CASE WHEN cur.hand THEN 1 WHEN l.reentry > 1 THEN l.reentry - 1 WHEN l.shared_until > now() THEN 1 ELSE 0 END,
        owner        = CASE WHEN cur.hand THEN ` + owner + ` WHEN l.reentry > 1 THEN l.owner WHEN l.shared_until > now() THEN '' END,
        version      = CASE WHEN cur.hand THEN nextval('dblock_token_seq') ELSE l.version END,
        mode         = CASE WHEN cur.hand THEN ` + mode + ` WHEN l.reentry <= 1 AND l.shared_until > now() THEN '` + readMode + `' ELSE l.mode END,
        acquired_at  = CASE WHEN cur.hand THEN now() ELSE l.acquired_at END,
        metadata     = CASE WHEN cur.hand THEN ` + metadata + ` ELSE l.metadata END,
        expires_at   = CASE WHEN cur.hand THEN now() + ` + ttl + `::bigint * interval '1 microsecond'
                            WHEN l.reentry > 1 THEN l.expires_at WHEN l.shared_until > now() THEN l.shared_until END,
        shared_until = CASE WHEN l.reentry > 1 THEN l.shared_until END,
        reader       = NULL,
        next_owner   = CASE WHEN cur.hand AND (l.next_owner = ` + owner + ` OR l.next_until <= now()) THEN NULL ELSE l.next_owner END,
        next_since   = CASE WHEN cur.hand AND (l.next_owner = ` + owner + ` OR l.next_until <= now()) THEN NULL ELSE l.next_since END,
        next_until   = CASE WHEN cur.hand AND (l.next_owner = ` + owner + ` OR l.next_until <= now()) THEN NULL ELSE l.next_until END,
        updated_at   = now()
    FROM cur WHERE l.name = cur.name`
}
