package store

// A release that frees a name kept for another owner's waiter (a live
// reservation, see reserve.go) hands the name to that waiter: where the
// release statement can say so (LeaseSQL.ReleaseKept, PostgreSQL), it
// returns the reservation's owner and announces the release to that owner
// alone, with the notice name + NoticeSep + owner instead of the name.
// ReleaseLeaseKept returns the owner to the releasing Locker, which then
// leaves its own next waiter asleep instead of waking it to be refused,
// and the other processes' waiters of the name are not woken either
// (internal/wake reads the notice).

// NoticeSep separates a targeted notice's name from the owner it is for.
// A name may contain it too: a listener reads a notice as every name it
// could be (the whole payload, and each prefix before a NoticeSep) and
// wakes too many rather than too few.
const NoticeSep = '\x1f'
