package pessimistic

import (
	"context"
	"database/sql"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/leasemode"
	"github.com/dblock-go/dblock/internal/store"
)

// The shared form of a hold: the same hold, its row locked in share mode
// (store.RowLockParams.Shared), without the in-process gate (enterAll), a
// token, or more names; readers of the lease modes do not stand in its way
// (check).

// AcquireShared takes name's shared lock: its transaction locks the row
// FOR KEY SHARE (PostgreSQL) or FOR SHARE (MySQL; MariaDB LOCK IN SHARE
// MODE), so other shared holds of the name are granted beside it, and
// every exclusive acquirer, of this mode or a lease mode, waits or is
// refused until it ends. A name held exclusively by a lease or another
// transaction makes it wait, like Acquire. On PostgreSQL it also shares
// with the readers of package rwlock (leases), whose statements never take
// a lock FOR KEY SHARE conflicts with; on MySQL and MariaDB, where InnoDB
// has no such pair of locks, a reader waits for the shared holds to end
// whenever it writes the row (to begin a readers' period, and to release;
// MariaDB's readers joining a period with half its TTL left do not), and a
// shared hold is granted beside readers already holding. On SQLite, which
// locks the whole database, a shared hold is an exclusive one. The hold
// takes no token of its own (WithToken is refused), locks no more names
// (Lock), and a second AcquireShared by its owner re-enters it; Acquire by
// an owner holding the shared lock is refused with ErrUpgrade, never a
// wait on itself.
func (l *Locker) AcquireShared(ctx context.Context, name string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, kindShared, []string{name}, opts)
}

// TryAcquireShared is AcquireShared without waiting.
func (l *Locker) TryAcquireShared(ctx context.Context, name string, opts ...dblock.Option) (*Lease, error) {
	return l.acquire(ctx, kindTryShared, []string{name}, opts)
}

// DoShared is Do with the shared lock of name (see AcquireShared).
func (l *Locker) DoShared(ctx context.Context, name string, fn func(ctx context.Context, tx *sql.Tx) error, opts ...dblock.Option) (err error) {
	return l.do(ctx, l.AcquireShared, name, fn, opts)
}

// ErrUpgrade is the refusal of the exclusive lock to an owner that holds
// the shared lock of the name in this Locker (it would wait for itself):
// release the shared lock first. It is rwlock.ErrUpgrade; the error also
// wraps dblock.ErrNotAcquired.
var ErrUpgrade = leasemode.ErrUpgrade

// readersOnly reports that h, a held lease row, is held by readers of
// package rwlock only (their period: an empty owner), whom a shared hold
// shares with.
func readersOnly(h store.Holder) bool {
	return h.Owner == "" && h.Mode == dblock.ModeRead
}
