package store

import (
	"context"
	"fmt"
	"sort"
)

// The transaction-hold probe of the server databases (PostgreSQL, MySQL and
// MariaDB), whose pessimistic holds are row locks: the rows that name no
// live lease are read twice with a shared locking read that skips locked
// rows, and those skipped both times are reported. Each engine supplies its
// statements and the way it runs the locking read (rowProber).

// rowProber is a server engine's part of the row-lock probe.
type rowProber interface {
	// txCandidatesSQL returns the statement reading, in name order, the
	// names whose row names no live lease holder, with filter (an AND on
	// the column name, or "") ending its WHERE.
	txCandidatesSQL(filter string) string
	// unlockedNames runs a shared locking read with SKIP LOCKED of the rows
	// of names and returns the names it read: those no other transaction
	// holds locked.
	unlockedNames(ctx context.Context, db *DB, names []string) ([]string, error)
}

// probeRowLocks is ProbeTxHolds on a server database, whose engine p is:
// up to limit candidates (TxProbeLimitDefault when limit <= 0) when names
// is empty, each reported when the locking read skipped it twice, the
// second time after reading again that it still names no live lease.
func (server) probeRowLocks(ctx context.Context, db *DB, names []string, limit int, p rowProber) (TxHolds, error) {
	if limit <= 0 {
		limit = TxProbeLimitDefault
	}
	var out TxHolds
	cands, err := db.txCandidates(ctx, p, names, limit+1)
	if err != nil {
		return TxHolds{}, err
	}
	if len(names) == 0 && len(cands) > limit {
		cands, out.Limited = cands[:limit], true
	}
	for round := 0; round < 2 && len(cands) > 0; round++ {
		if round > 0 {
			// Those still naming no live lease.
			if cands, err = db.txCandidates(ctx, p, cands, 0); err != nil {
				return TxHolds{}, err
			}
			if len(cands) == 0 {
				break
			}
		}
		if cands, err = db.skipped(ctx, p, cands); err != nil {
			return TxHolds{}, err
		}
	}
	sort.Strings(cands)
	out.Names = cands
	return out, nil
}

// txCandidates returns the names (all, or those of names) whose row names no
// live lease holder, in name order, at most limit of them (0: no limit). On
// PostgreSQL only rows with xmax set are returned: a row lock sets it.
func (db *DB) txCandidates(ctx context.Context, p rowProber, names []string, limit int) ([]string, error) {
	query := p.txCandidatesSQL(db.nameFilter("name", names, 1, " AND "))
	if limit > 0 {
		query += fmt.Sprintf(" LIMIT %d", limit)
	}
	return db.names(ctx, db, query, nameArgs(names))
}

// skipped returns those of names (rows that exist) that a shared locking
// read with SKIP LOCKED skips: rows another transaction holds locked.
func (db *DB) skipped(ctx context.Context, p rowProber, names []string) ([]string, error) {
	free, err := p.unlockedNames(ctx, db, names)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(free))
	for _, n := range free {
		seen[n] = true
	}
	var out []string
	for _, n := range names {
		if !seen[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// names runs query on q and returns the one column of names it answers.
func (db *DB) names(ctx context.Context, q Querier, query string, args []any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name []byte
		if err := rows.Scan(&name); err != nil {
			return nil, db.Classify(err)
		}
		out = append(out, string(name))
	}
	return out, db.Classify(rows.Err())
}
