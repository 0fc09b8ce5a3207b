package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dblock-go/dblock/internal/store"
)

// InnoDB purges the undo of committed transactions in the background, and
// until purge catches up the deleted rows of dblock_shares and
// dblock_waiters stay in their indexes. MariaDB's read pair measured 0.71×
// the optimistic pair on a quiet server and 0.58× with a snapshot held open
// through the run (history list 92,540 at its end). So a run on
// MySQL/MariaDB starts once the history list is short, and says where it
// stood.
const (
	purgedBelow = 1000            // history list length counted as caught up
	purgeWait   = 3 * time.Minute // the longest wait for it
	purgePoll   = 500 * time.Millisecond
)

// waitPurged waits, on MySQL/MariaDB, until InnoDB's history list is below
// purgedBelow or purgeWait has passed, and describes the state it started
// in for the results' header ("" on other databases).
func waitPurged(ctx context.Context, e *env) string {
	if e.kind != store.MySQL {
		return ""
	}
	start := time.Now()
	n, err := historyLength(ctx, e)
	for err == nil && n >= purgedBelow && time.Since(start) < purgeWait {
		fmt.Fprintf(os.Stderr, "bench: %s: waiting for InnoDB purge (history list %d)\n", e.label, n)
		if err := sleepCtx(ctx, purgePoll); err != nil {
			break
		}
		n, err = historyLength(ctx, e)
	}
	if err != nil {
		return fmt.Sprintf("InnoDB history list unknown (%v)", err)
	}
	waited := time.Since(start).Round(time.Second)
	if waited < time.Second {
		return fmt.Sprintf("InnoDB history list %d at the start", n)
	}
	return fmt.Sprintf("InnoDB history list %d at the start, after waiting %s for purge", n, waited)
}

// historyLength reads the status variable Innodb_history_list_length
// (MariaDB), or where there is none the metric trx_rseg_history_len (MySQL
// 8, where it is enabled by default).
func historyLength(ctx context.Context, e *env) (int64, error) {
	var name string
	var n int64
	err := e.admin.SQL().QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_history_list_length'").Scan(&name, &n)
	if errors.Is(err, sql.ErrNoRows) {
		err = e.admin.SQL().QueryRowContext(ctx,
			"SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'").Scan(&n)
	}
	return n, err
}
