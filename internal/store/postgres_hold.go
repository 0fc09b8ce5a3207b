package store

import (
	"context"
	"time"
)

// PostgreSQL's hold engine: the lock statements set the transaction's idle
// bound themselves (idle_in_transaction_session_timeout, in milliseconds),
// and a failed transaction stays open until its end, whose COMMIT reports
// the rollback: nothing to set or check here.

// holdBound: the millisecond.
func (postgres) holdBound(ttl time.Duration) time.Duration { return ceilTo(ttl, time.Millisecond) }

func (postgres) checksCommit() bool { return false }

func (postgres) setHoldBound(context.Context, *DB, Querier, time.Duration, int64) error { return nil }

func (postgres) endHold(context.Context, *DB, Querier, bool) (bool, error) { return true, nil }
