package store

import "sync"

// A release that frees a name kept for another owner's waiter (a live
// reservation, see reserve.go) hands the name to that waiter: where the
// release statement can say so (LeaseSQL.ReleaseKept, PostgreSQL), it
// returns the reservation's owner and announces the release to that owner
// alone, with the notice name + NoticeSep + owner instead of the name. The
// releasing DB remembers the owner for its Locker, which then leaves its
// own next waiter asleep instead of waking it to be refused
// (KeptAtRelease), and the other processes' waiters of the name are not
// woken either (internal/wake reads the notice).

// NoticeSep separates a targeted notice's name from the owner it is for.
// A name may contain it too: a listener reads a notice as every name it
// could be (the whole payload, and each prefix before a NoticeSep) and
// wakes too many rather than too few.
const NoticeSep = '\x1f'

// keptNames maps a name this DB freed lately to the owner a reservation
// kept it for, until that is read. The zero value is ready.
type keptNames struct {
	mu sync.Mutex
	m  map[string]string
}

// set records owner for name ("" forgets name).
func (k *keptNames) set(name, owner string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if owner == "" {
		delete(k.m, name)
		return
	}
	if k.m == nil || len(k.m) >= keptMax {
		k.m = make(map[string]string, 16)
	}
	k.m[name] = owner
}

// take returns the owner recorded for name and forgets it.
func (k *keptNames) take(name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	owner, ok := k.m[name]
	if ok {
		delete(k.m, name)
	}
	return owner
}

// keptMax bounds the names remembered (releases whose mode never reads
// them: past it the memory starts over, a hint lost).
const keptMax = 1024

// KeptAtRelease returns, once, the owner of the reservation that kept name
// for another waiter when this DB last freed it ("" when none did, or where
// the release cannot tell).
func (db *DB) KeptAtRelease(name string) string { return db.kept.take(name) }
