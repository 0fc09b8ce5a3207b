package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/backoff"
)

// The shared locks in one statement each, where the database has them
// (SharedSQL.Acquire, Release, Renew: PostgreSQL).

// acquireShareOne is AcquireShare in one statement.
func (db *DB) acquireShareOne(ctx context.Context, p ShareParams) (ShareResult, error) {
	var (
		res                     ShareResult
		token                   int64
		owner, mode             string
		expUs, nowUs, grantedUs int64
	)
	args := []any{p.Name, p.Owner, p.TTL.Microseconds(), nullString(p.Metadata)}
	query := db.shareAcquireSQL()
	err := db.retryRowLocked(ctx, shareLockedMax, func() error {
		return db.queryRow(ctx, db, query, args,
			&res.Acquired, &token, &owner, &mode, &expUs, &nowUs, &res.WriterWaits, &grantedUs)
	})
	sh := db.Dialect.Shared()
	if err == nil && sh.TakeFree != "" && query == sh.Acquire && !db.readRecords.Load() {
		db.readRecords.Store(true) // The schema records readers: see shared_take.go.
	}
	if ProcedureRefused(err) && sh.AcquireFallback != "" && query != sh.AcquireFallback {
		// The refused call did nothing: from now on, the fallback (also
		// when a concurrent call got there first).
		db.noAcquireRead.Store(true)
		return db.acquireShareOne(ctx, p)
	}
	switch {
	case errors.Is(err, errRowLocked):
		return ShareResult{Holder: Holder{Exists: true, Mode: dblock.ModePessimistic}}, nil
	case err != nil:
		return ShareResult{}, err
	case res.Acquired:
		res.Token = dblock.Token(token)
		res.grant(grantedUs, p.TTL)
		return res, nil
	}
	h := Holder{Exists: true, Owner: owner, Version: token, Mode: mode, Now: Micros(nowUs)}
	if expUs != 0 {
		h.ExpiresAt = Micros(expUs)
	}
	if mode == "" && owner != "" {
		// A free name kept for a waiter: the statement names the
		// reservation's owner and end in place of a holder's.
		h = Holder{Exists: true, Version: token, Now: Micros(nowUs), Next: Reservation{Owner: owner, Until: h.ExpiresAt}}
	}
	res.Holder = h
	return res, nil
}

// shareAcquireSQL is the statement of acquireShareOne: SharedSQL.Acquire,
// or its fallback once Acquire's procedure was refused (MariaDB: see
// SharedSQL.AcquireFallback).
func (db *DB) shareAcquireSQL() string {
	sh := db.Dialect.Shared()
	if sh.AcquireFallback != "" && db.noAcquireRead.Load() {
		return sh.AcquireFallback
	}
	return sh.Acquire
}

// releaseShareOne is ReleaseShare in one statement, query (SharedSQL.Release
// or ReleaseJoined).
func (db *DB) releaseShareOne(ctx context.Context, query, name, owner string, token dblock.Token) (bool, error) {
	var released bool
	err := db.retryRowLocked(ctx, shareEndLockedMax, func() error {
		return db.queryRow(ctx, db, query, []any{name, owner, int64(token)}, &released)
	})
	if errors.Is(err, errRowLocked) {
		err = releaseLocked(name, err)
	}
	return released, err
}

// releaseLocked is the error of a share's release whose row stayed locked
// (errRowLocked).
func releaseLocked(name string, err error) error {
	return fmt.Errorf("%w: release of %q: %w", dblock.ErrUnavailable, name, err)
}

// renewShareOne is RenewShare in one statement.
func (db *DB) renewShareOne(ctx context.Context, name, owner string, token dblock.Token, ttl time.Duration) (bool, error) {
	var renewed bool
	err := db.retryRowLocked(ctx, shareEndLockedMax, func() error {
		return db.queryRow(ctx, db, db.Dialect.Shared().Renew, []any{name, owner, int64(token), ttl.Microseconds()}, &renewed)
	})
	if errors.Is(err, errRowLocked) {
		err = fmt.Errorf("%w: renewal of %q: %w", dblock.ErrUnavailable, name, err)
	}
	return renewed, err
}

// retryRowLocked runs attempt until it did not fail for another
// transaction's locks (IsRetryable: the name's row stayed locked past the
// statement's wait, or the server rolled the attempt back whole as a
// deadlock's victim or a serialization failure; MariaDB's readers
// releasing one name at once can deadlock, a SKIP LOCKED read waiting for
// a share another release deleted but has not committed), for
// limit at most (shareLockedMax, or shareEndLockedMax for a release or a
// renewal): then errRowLocked where the row stayed locked, else the last
// error. Other errors, classified, end it.
func (db *DB) retryRowLocked(ctx context.Context, limit time.Duration, attempt func() error) error {
	var first time.Time
	pause := fenceRetryMin
	for {
		err := db.Classify(attempt())
		if err == nil || errors.Is(err, errRowLocked) || !IsRetryable(err) {
			return err
		}
		if first.IsZero() {
			first = time.Now()
		} else if time.Since(first) >= limit {
			if errors.Is(err, dblock.ErrNotAcquired) {
				return errRowLocked
			}
			return err
		}
		if err := sleepCtx(ctx, backoff.Jitter(pause)); err != nil {
			return err
		}
		pause = min(2*pause, fenceRetryMax)
	}
}
