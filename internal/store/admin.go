package store

import (
	"context"
	"strings"
	"time"

	"github.com/dblock-go/dblock"
)

// adminEngine is the binding of the administrators' listings on one database (see engine).
type adminEngine interface {
	// listLocksSQL is ListLocks' statement (or, reserved, ListReserved's),
	// with filter (an AND on the column name, or "") after its WHERE (see
	// lockRowsWhere): the rows, their times in µs since the epoch (0 for
	// NULL) and the database clock, by name.
	listLocksSQL(reserved bool, filter string) string
	// listWaitersSQL is ListWaiters' statement, with filter (an AND on the
	// column w.name, or "") after its WHERE: the live waiters, each with its
	// position in its name's queue, their times in µs and the database clock.
	listWaitersSQL(filter string) string
}

// Administrative reads for `dblock status`. They take no row locks and never
// wait for one, so they can run at any time without slowing lock traffic.

// LockRow is a held lock as `dblock status` shows it: a dblock_locks row that
// names an owner. Its lease may already have expired by the database clock
// when the reaper has not freed it yet (see Expired).
type LockRow struct {
	Name       string
	Owner      string
	Token      int64 // The version column: the fencing token of the hold.
	Reentry    int
	Mode       string
	AcquiredAt time.Time // Zero when unknown.
	ExpiresAt  time.Time // Zero when the hold has no lease.
	UpdatedAt  time.Time
	Metadata   string
	Now        time.Time // The database clock when the row was read.
	// Next is the name's reservation for once it is freed (Owner empty
	// when there is none; it may have lapsed: Reserved says).
	Next Reservation
}

// Reserved reports whether a live reservation keeps the name for Next.Owner.
func (r LockRow) Reserved() bool { return r.Next.LiveAt(r.Now) }

// Expired reports whether the row's lease ran out by the database clock.
func (r LockRow) Expired() bool { return !r.ExpiresAt.IsZero() && !r.ExpiresAt.After(r.Now) }

// WaiterRow is a live fair-queue waiter (its heartbeat deadline not yet
// passed by the database clock). Position is 1 for the oldest live waiter of
// its name, ordered by created_at, then id, as the fair locker orders them;
// a semaphore's requests are numbered apart from the lock's waiters.
type WaiterRow struct {
	ID          int64
	Name        string
	Owner       string
	Kind        WaitKind
	Position    int
	CreatedAt   time.Time
	HeartbeatAt time.Time
	ExpiresAt   time.Time
	Now         time.Time // The database clock when the row was read.
}

// ListLocks returns the held locks (rows naming an owner), ordered by name.
// With names, only those names are considered; names that are not held are
// simply absent; a bad name is refused (dblock.ErrInvalidName). Errors are
// classified (a missing table is ErrSchemaMissing).
func (db *DB) ListLocks(ctx context.Context, names []string) ([]LockRow, error) {
	return db.listLocks(ctx, false, names)
}

// ListReserved returns the free names that a live reservation keeps for
// one waiter (see reserve.go: only Next.Owner may take such a name until
// the reservation lapses), ordered by name, as rows with an empty Owner and
// Mode. With names, only those are considered (a bad one is refused).
func (db *DB) ListReserved(ctx context.Context, names []string) ([]LockRow, error) {
	return db.listLocks(ctx, true, names)
}

// lockRowsWhere is the condition of listLocksSQL's rows: those naming an
// owner, or, reserved, the free ones whose reservation lasts past now (the
// database clock as the dialect writes it).
func lockRowsWhere(reserved bool, now string) string {
	if reserved {
		return "owner IS NULL AND next_owner IS NOT NULL AND next_until > " + now
	}
	return "owner IS NOT NULL"
}

// listLocks reads ListLocks' rows, or ListReserved's.
func (db *DB) listLocks(ctx context.Context, reserved bool, names []string) ([]LockRow, error) {
	if err := validateNames(names); err != nil {
		return nil, err
	}
	query := db.Dialect.listLocksSQL(reserved, db.nameFilter("name", names, 1, " AND "))
	rows, err := db.QueryContext(ctx, query, nameArgs(names)...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	var out []LockRow
	for rows.Next() {
		var (
			r                                 LockRow
			acqUs, expUs, updUs, nowUs        int64
			sinceUs, untilUs                  int64
			name, owner, mode, metadata, next []byte
		)
		if err := rows.Scan(&name, &owner, &r.Token, &r.Reentry, &mode, &acqUs, &expUs, &updUs, &metadata, &nowUs,
			&next, &sinceUs, &untilUs); err != nil {
			return nil, db.Classify(err)
		}
		r.Name, r.Owner, r.Mode, r.Metadata = string(name), string(owner), string(mode), string(metadata)
		r.AcquiredAt, r.ExpiresAt, r.UpdatedAt, r.Now = microsOrZero(acqUs), microsOrZero(expUs), microsOrZero(updUs), Micros(nowUs)
		r.Next = reservationOf(string(next), sinceUs, untilUs)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, db.Classify(err)
	}
	return out, nil
}

// ListWaiters returns the live fair-queue waiters (heartbeat deadline not yet
// passed by the database clock), ordered by name and queue position. With
// names, only those names are considered (a bad one is refused:
// dblock.ErrInvalidName). Stale waiters, which the reaper removes, are not
// listed and take no position.
func (db *DB) ListWaiters(ctx context.Context, names []string) ([]WaiterRow, error) {
	if err := validateNames(names); err != nil {
		return nil, err
	}
	query := db.Dialect.listWaitersSQL(db.nameFilter("w.name", names, 1, " AND "))
	rows, err := db.QueryContext(ctx, query, nameArgs(names)...)
	if err != nil {
		return nil, db.Classify(err)
	}
	defer rows.Close()
	var out []WaiterRow
	for rows.Next() {
		var (
			w                        WaiterRow
			crUs, hbUs, expUs, nowUs int64
			name, owner, kind        []byte
		)
		if err := rows.Scan(&w.ID, &name, &owner, &kind, &w.Position, &crUs, &hbUs, &expUs, &nowUs); err != nil {
			return nil, db.Classify(err)
		}
		w.Name, w.Owner, w.Kind = string(name), string(owner), WaitKind(kind)
		w.CreatedAt, w.HeartbeatAt, w.ExpiresAt, w.Now = Micros(crUs), Micros(hbUs), Micros(expUs), Micros(nowUs)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, db.Classify(err)
	}
	return out, nil
}

// nameFilter returns `<join><col> IN (<placeholders>)` for names, numbering
// placeholders from first, or "" when names is empty. Only placeholders are
// formatted into the statement; the names travel as bind parameters.
func (db *DB) nameFilter(col string, names []string, first int, join string) string {
	if len(names) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(join)
	b.WriteString(col)
	b.WriteString(" IN (")
	for i := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(db.Dialect.Placeholder(first + i))
	}
	b.WriteString(")")
	return b.String()
}

// filterNames puts a filter on the column name for names (none when names
// is empty, placeholders from 1) before the ORDER BY that ends query (at
// its end without one); query has a WHERE clause.
func (db *DB) filterNames(query string, names []string) string {
	if len(names) == 0 {
		return query
	}
	i := strings.LastIndex(query, " ORDER BY ")
	if i < 0 {
		i = len(query)
	}
	return query[:i] + db.nameFilter("name", names, 1, " AND ") + query[i:]
}

// validateNames refuses the first bad name of names (dblock.ValidateName)
// before it reaches the database, which would answer with an error of its
// own, or none.
func validateNames(names []string) error {
	for _, n := range names {
		if err := dblock.ValidateName(n); err != nil {
			return err
		}
	}
	return nil
}

func nameArgs(names []string) []any {
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	return args
}

func microsOrZero(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return Micros(us)
}
