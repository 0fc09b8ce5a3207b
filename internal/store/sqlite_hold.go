package store

import (
	"context"
	"time"
)

// SQLite's hold engine: no sessions, so no bound on an idle hold, and
// nothing to restore or check before the transaction ends.

func (sqliteDialect) holdBound(time.Duration) time.Duration { return 0 }

func (sqliteDialect) checksCommit() bool { return false }

func (sqliteDialect) setHoldBound(context.Context, *DB, Querier, time.Duration, int64) error {
	return nil
}

func (sqliteDialect) endHold(context.Context, *DB, Querier, bool) (bool, error) { return true, nil }
