package store

import (
	"context"
	"fmt"
)

// WaitKind is what a waiter of dblock_waiters waits for (its kind column).
// One queue serves every fair acquisition: a waiter waits for the live
// waiters ahead of it that it conflicts with.
type WaitKind string

const (
	// WaitExclusive is a fairqueue waiter or an rwlock fair writer: it
	// conflicts with every waiter of the name ahead of it but the
	// semaphores'.
	WaitExclusive WaitKind = "exclusive"
	// WaitRead is an rwlock fair reader: it conflicts with the exclusive
	// waiters ahead of it only, so readers queued together go in together.
	WaitRead WaitKind = "read"
	// WaitSemaphore is a semaphore's fair grant: it queues apart from the
	// lock of the same name, behind every earlier grant of its semaphore.
	WaitSemaphore WaitKind = "semaphore"
)

// gateConflict is the condition under which waiter a (an alias) is in the
// way of a waiter of kind k (an expression): the same space (a semaphore's
// or the lock's), and not two readers.
func gateConflict(a, k string) string {
	return fmt.Sprintf("(%[1]s.kind = 'semaphore') = (%[2]s = 'semaphore') AND (%[2]s <> 'read' OR %[1]s.kind <> 'read')", a, k)
}

// gateSQL builds QueueSQL's GatePeek and GateCheck from a database's clock
// expression and placeholders; the rest of the text is the same on every
// database.
func gateSQL(now string, ph func(int) string) (peek, check string) {
	peek = fmt.Sprintf(`SELECT
    (SELECT COUNT(*) FROM dblock_waiters w WHERE w.name = %[2]s AND w.expires_at > %[1]s
        AND (w.kind = 'semaphore') = (%[3]s = 'semaphore') AND (%[4]s <> 'read' OR w.kind <> 'read')),
    CASE WHEN EXISTS (SELECT 1 FROM dblock_locks l WHERE l.name = %[5]s AND l.expires_at > %[1]s
               AND (l.owner = %[6]s OR (l.owner = '' AND l.reader = %[7]s)))
           OR EXISTS (SELECT 1 FROM dblock_shares s WHERE s.name = %[8]s AND s.owner = %[9]s AND s.expires_at > %[1]s)
         THEN 1 ELSE 0 END`,
		now, ph(1), ph(2), ph(3), ph(4), ph(5), ph(6), ph(7), ph(8))
	check = fmt.Sprintf(`SELECT COUNT(me.id), COUNT(w.id)
FROM dblock_waiters me
LEFT JOIN dblock_waiters w ON w.name = me.name AND w.expires_at > %[1]s
    AND (w.created_at < me.created_at OR (w.created_at = me.created_at AND w.id < me.id))
    AND %[3]s
WHERE me.id = %[2]s AND me.expires_at > %[1]s`,
		now, ph(1), gateConflict("w", "me.kind"))
	return peek, check
}

// GateState is what a fair acquisition reads of its name's queue.
type GateState struct {
	// Queued counts the live waiters in the way of a newcomer (PeekGate),
	// or ahead of the checked waiter (CheckGate).
	Queued int
	// OwnerHolds reports that the owner holds the name already, exclusively
	// or as a reader (PeekGate of the lock's kinds only): its acquisition
	// is a re-entry, a downgrade or an upgrade refusal, which never waits
	// in the queue.
	OwnerHolds bool
	// Live reports that the checked waiter is still live (CheckGate only).
	Live bool
}

// PeekGate reads how many live waiters of name are in the way of a
// newcomer of kind, and whether owner holds name already.
func (db *DB) PeekGate(ctx context.Context, name string, kind WaitKind, owner string) (GateState, error) {
	var s GateState
	var holds int
	err := db.q(nil).QueryRowxContext(ctx, db.Dialect.Queue().GatePeek, name, string(kind), string(kind),
		name, owner, owner, name, owner).Scan(&s.Queued, &holds)
	if err != nil {
		return GateState{}, db.Classify(err)
	}
	s.OwnerHolds = holds != 0 && kind != WaitSemaphore
	return s, nil
}

// CheckGate reads whether waiter id is live and how many live waiters
// ahead of it it must let go first.
func (db *DB) CheckGate(ctx context.Context, id int64) (GateState, error) {
	var s GateState
	var live int
	if err := db.q(nil).QueryRowxContext(ctx, db.Dialect.Queue().GateCheck, id).Scan(&live, &s.Queued); err != nil {
		return GateState{}, db.Classify(err)
	}
	s.Live = live != 0
	return s, nil
}
