package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/dblock-go/dblock"
)

// SlotSQL holds the statements of scheduled jobs (package schedule).
// Parameters come in the order the statement text names them; times are µs
// since the epoch.
type SlotSQL struct {
	// Claim (job, slot) records slot as the job's last when it is later
	// than the recorded one (or none is): one row affected (MySQL: 1 or 2)
	// when it did, none when the slot was claimed already.
	Claim string
	// Last (job) reads the job's last slot.
	Last string
	// Keep (lower µs, name, owner, version, lower µs) leaves a lease held
	// until its acquisition plus lower by the database clock, instead of
	// releasing it, when that is still ahead; one row affected when it did.
	Keep string
}

// ClaimSlot records slot as job's last run unless a slot at or after it
// was claimed already; it reports whether this call claimed it.
func (db *DB) ClaimSlot(ctx context.Context, job string, slot time.Time) (bool, error) {
	return db.execOne(ctx, db, db.Dialect.Slots().Claim, job, slot.UnixMicro())
}

// LastSlot reads the last slot job ran for (zero when none).
func (db *DB) LastSlot(ctx context.Context, job string) (time.Time, error) {
	var us int64
	err := db.QueryRowxContext(ctx, db.Dialect.Slots().Last, job).Scan(&us)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, db.Classify(err)
	}
	return Micros(us), nil
}

// KeepLease leaves the lease (name, owner, token) held until lower after its
// acquisition by the database clock, when that is still ahead: the release
// that keeps a scheduled job's lock for its lower bound. It reports false
// when the time has passed (the caller then releases as usual) or the lease
// is no longer held.
func (db *DB) KeepLease(ctx context.Context, name, owner string, token dblock.Token, lower time.Duration) (bool, error) {
	us := lower.Microseconds()
	return db.execOne(ctx, db, db.Dialect.Slots().Keep, us, name, owner, int64(token), us)
}
