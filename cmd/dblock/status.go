package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
)

const statusHelp = `Usage: dblock [--dsn DSN] status [--json] [NAME...]

Lists the held locks (name, owner, fencing token, reentry count, mode, when
acquired, when the lease expires) and the fair-queue waiters (queue position
and how long each has waited). With NAMEs, only those locks; a NAME that
nobody holds is reported free. Times come from the database clock.

A lease past its expiry that the reaper has not freed yet is shown as
"expired ... ago": anyone may take it.

A lock held in pessimistic mode is a running transaction's row lock and
writes no owner: status finds it with a locking read that never waits (SKIP
LOCKED; its own shared lock lasts one statement) and shows it with mode
pessimistic, no owner, no token (the holder's is not committed yet) and no
lease: it lasts until its transaction ends. With NAMEs, those names are
probed; without, up to 1000 rows that no live lease names (PostgreSQL: only
rows a lock has marked), in name order, and a note says when there were
more: name a lock to be sure. On PostgreSQL the locking read needs UPDATE on
dblock_locks: a role without it gets the rest, and one line on stderr saying
that transaction holds are not shown. On SQLite a pessimistic hold is the
database's write lock, which does not say which name it is for: status says
"database write-locked by a transaction", and reports every NAME asked for
that no lease row names as held by it (none can be taken until it ends).

Flags:
  --json   print one JSON document instead of tables (see below)

JSON (stable; times are RFC 3339 UTC with microseconds, durations are
seconds as numbers, null when there is no value):
  {
    "format_version": 1,
    "now": "2026-01-02T15:04:05.000000Z",
    "write_locked": false,
    "locks": [{"name": "...", "owner": "...", "token": 7, "reentry": 1,
               "mode": "optimistic", "acquired_at": "...", "expires_at": "...",
               "expires_in_seconds": 12.5, "expired": false, "metadata": "..."}],
    "waiters": [{"name": "...", "owner": "...", "position": 1, "id": 3,
                 "waiting_since": "...", "wait_seconds": 2.25,
                 "heartbeat_at": "...", "expires_at": "..."}],
    "free": ["names asked for that nobody holds"],
    "tx_holds_checked": true,
    "unknown": ["names asked for whose state could not be checked"],
    "unknown_reason": null
  }
A name is never reported free without being checked: when the probe for
transaction holds cannot run (a role that may not lock rows of dblock_locks),
"tx_holds_checked" is false, "unknown_reason" says why, and the names asked
for that no lease or waiter names are listed in "unknown" (in the table: a
line "unknown: NAMES (why)") instead of "free".
A transaction (pessimistic) hold has "mode": "pessimistic", "owner": "",
"token": null, "reentry": 0 and null times; "write_locked" is true when an
SQLite database is write-locked by a transaction ("now" is the database
clock, read when no row carried it).

Examples:
  dblock status
  dblock status nightly-report invoice:42
  dblock status --json | jq '.locks[] | {name, owner, expires_in_seconds}'
`

// statusTimeout bounds the status queries.
const statusTimeout = 30 * time.Second

// jsonTime is the layout of times in status --json: RFC 3339, UTC, fixed
// microseconds, so that tools can compare them as strings.
const jsonTime = "2006-01-02T15:04:05.000000Z07:00"

// statusJSON is the document printed by status --json. Its shape is stable:
// fields are only ever added, and format_version changes if one ever changes
// meaning.
type statusJSON struct {
	FormatVersion int    `json:"format_version"`
	Now           string `json:"now"`
	// WriteLocked: SQLite only, a transaction holds the database's write
	// lock (a pessimistic hold locks the whole file).
	WriteLocked bool         `json:"write_locked"`
	Locks       []lockJSON   `json:"locks"`
	Waiters     []waiterJSON `json:"waiters"`
	Free        []string     `json:"free"`
	// TxHoldsChecked is false when the probe for transaction (pessimistic)
	// holds could not run (a role that may not lock rows): Locks then shows
	// the leases only, and the names asked for that no lease or waiter
	// names are Unknown, never Free.
	TxHoldsChecked bool     `json:"tx_holds_checked"`
	Unknown        []string `json:"unknown"`
	UnknownReason  *string  `json:"unknown_reason"`
}

type lockJSON struct {
	Name             string   `json:"name"`
	Owner            string   `json:"owner"`
	Token            *int64   `json:"token"` // Null for a transaction hold.
	Reentry          int      `json:"reentry"`
	Mode             string   `json:"mode"`
	AcquiredAt       *string  `json:"acquired_at"`
	ExpiresAt        *string  `json:"expires_at"`
	ExpiresInSeconds *float64 `json:"expires_in_seconds"`
	Expired          bool     `json:"expired"`
	Metadata         string   `json:"metadata"`
}

type waiterJSON struct {
	Name         string  `json:"name"`
	Owner        string  `json:"owner"`
	Position     int     `json:"position"`
	ID           int64   `json:"id"`
	WaitingSince string  `json:"waiting_since"`
	WaitSeconds  float64 `json:"wait_seconds"`
	HeartbeatAt  string  `json:"heartbeat_at"`
	ExpiresAt    string  `json:"expires_at"`
}

func (a *app) status(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if done, err := a.parseFlags(fs, statusHelp, args); done {
		return err
	}
	names := fs.Args()
	for _, n := range names {
		if err := dblock.ValidateName(n); err != nil {
			return withCode(exitUsage, fmt.Errorf("status: %w", err))
		}
	}
	db, err := a.open(ctx, schemaRequired)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	rows, err := db.ListLocks(ctx, names)
	if err != nil {
		return fmt.Errorf("status: %w", a.schemaError(err))
	}
	waiters, err := db.ListWaiters(ctx, names)
	if err != nil {
		return fmt.Errorf("status: %w", a.schemaError(err))
	}
	tx, err := db.ProbeTxHolds(ctx, names, dialect.TxProbeLimitDefault)
	unchecked := ""
	switch {
	case dialect.PermissionDenied(err):
		// A read-only role (PostgreSQL wants UPDATE for a locking read)
		// still gets the lease holders, with a word about what is missing,
		// and no name it could not check is called free.
		unchecked = "transaction (pessimistic) holds not checked: this role may not lock rows of dblock_locks (PostgreSQL: grant it UPDATE)"
		a.errorLine(fmt.Errorf("status: %s: %w", strings.Replace(unchecked, "not checked", "not shown", 1), err))
		tx = dialect.TxHolds{}
	case err != nil:
		return fmt.Errorf("status: probe for transaction holds: %w", a.schemaError(err))
	}
	var now time.Time
	switch {
	case len(rows) > 0:
		now = rows[0].Now
	case len(waiters) > 0:
		now = waiters[0].Now
	default:
		if now, err = db.ClockNow(ctx); err != nil {
			return fmt.Errorf("status: read the database clock: %w", err)
		}
	}
	st := statusData{
		now: now, locks: mergeTxHolds(now, names, rows, tx), waiters: waiters,
		writeLocked: tx.WriteLocked, limited: tx.Limited, unchecked: unchecked,
	}
	st.free = freeNames(names, st.locks, waiters)
	if unchecked != "" {
		st.free, st.unknown = []string{}, st.free
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(buildStatus(st))
	}
	return a.printStatus(st)
}

// statusData is what status found.
type statusData struct {
	now         time.Time // The database clock.
	locks       []lockEntry
	waiters     []dialect.WaiterRow
	free        []string
	writeLocked bool // SQLite: a transaction holds the write lock.
	limited     bool // Not every row was probed for transaction holds.
	// unchecked, when set, says why transaction holds could not be
	// probed; the names asked for that would be free are unknown instead.
	unchecked string
	unknown   []string
}

// lockEntry is a held lock: a lease row, or a transaction hold (tx), which
// has a name and nothing else.
type lockEntry struct {
	dialect.LockRow
	tx bool
}

// mergeTxHolds returns the held locks: the lease rows, with the transaction
// holds the probe found in place of any expired lease row of the same name,
// in name order. On a write-locked SQLite database every name asked for
// that no lease row names is held by the transaction.
func mergeTxHolds(now time.Time, names []string, rows []dialect.LockRow, tx dialect.TxHolds) []lockEntry {
	held := map[string]bool{}
	for _, n := range tx.Names {
		held[n] = true
	}
	if tx.WriteLocked {
		listed := map[string]bool{}
		for _, r := range rows {
			listed[r.Name] = true
		}
		for _, n := range names {
			if !listed[n] {
				held[n] = true
			}
		}
	}
	var out []lockEntry
	for _, r := range rows {
		if held[r.Name] && r.Expired() {
			continue
		}
		delete(held, r.Name) // A live lease is the hold.
		out = append(out, lockEntry{LockRow: r})
	}
	for n := range held {
		out = append(out, lockEntry{LockRow: dialect.LockRow{Name: n, Mode: dblock.ModePessimistic, Now: now}, tx: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// freeNames returns the asked-for names that nobody holds or waits for, in
// the order given, without duplicates.
func freeNames(names []string, locks []lockEntry, waiters []dialect.WaiterRow) []string {
	busy := map[string]bool{}
	for _, l := range locks {
		busy[l.Name] = true
	}
	for _, w := range waiters {
		busy[w.Name] = true
	}
	free := []string{}
	for _, n := range names {
		if !busy[n] {
			free = append(free, n)
			busy[n] = true
		}
	}
	return free
}

func buildStatus(st statusData) statusJSON {
	doc := statusJSON{
		FormatVersion: 1,
		Now:           st.now.UTC().Format(jsonTime),
		WriteLocked:   st.writeLocked,
		Locks:         []lockJSON{},
		Waiters:       []waiterJSON{},
		Free:          st.free,

		TxHoldsChecked: st.unchecked == "",
		Unknown:        append([]string{}, st.unknown...),
	}
	if st.unchecked != "" {
		doc.UnknownReason = &st.unchecked
	}
	for _, l := range st.locks {
		j := lockJSON{
			Name: l.Name, Owner: l.Owner, Reentry: l.Reentry, Mode: l.Mode,
			Expired: l.Expired(), Metadata: l.Metadata,
		}
		if !l.tx {
			token := l.Token
			j.Token = &token
		}
		if !l.AcquiredAt.IsZero() {
			s := l.AcquiredAt.UTC().Format(jsonTime)
			j.AcquiredAt = &s
		}
		if !l.ExpiresAt.IsZero() {
			s := l.ExpiresAt.UTC().Format(jsonTime)
			secs := seconds(l.ExpiresAt.Sub(l.Now))
			j.ExpiresAt, j.ExpiresInSeconds = &s, &secs
		}
		doc.Locks = append(doc.Locks, j)
	}
	for _, w := range st.waiters {
		doc.Waiters = append(doc.Waiters, waiterJSON{
			Name: w.Name, Owner: w.Owner, Position: w.Position, ID: w.ID,
			WaitingSince: w.CreatedAt.UTC().Format(jsonTime),
			WaitSeconds:  seconds(w.Now.Sub(w.CreatedAt)),
			HeartbeatAt:  w.HeartbeatAt.UTC().Format(jsonTime),
			ExpiresAt:    w.ExpiresAt.UTC().Format(jsonTime),
		})
	}
	return doc
}

// seconds returns d in seconds, rounded to the millisecond.
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}

func (a *app) printStatus(st statusData) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if st.writeLocked {
		fmt.Fprintln(tw, "database write-locked by a transaction: no name can be taken until it ends (SQLite: a pessimistic hold locks the whole file)")
		fmt.Fprintln(tw)
	}
	if len(st.locks) == 0 {
		fmt.Fprintln(tw, "no locks held")
	} else {
		fmt.Fprintln(tw, "LOCK\tOWNER\tTOKEN\tREENTRY\tMODE\tACQUIRED\tEXPIRES")
		for _, l := range st.locks {
			if l.tx {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, "(a transaction)", "-", "-", l.Mode, "-", "when its transaction ends")
				continue
			}
			acquired := "-"
			if !l.AcquiredAt.IsZero() {
				acquired = ago(l.Now.Sub(l.AcquiredAt))
			}
			expires := "no lease"
			switch {
			case l.ExpiresAt.IsZero():
			case l.Expired():
				expires = "expired " + ago(l.Now.Sub(l.ExpiresAt))
			default:
				expires = "in " + human(l.ExpiresAt.Sub(l.Now))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", l.Name, l.Owner, l.Token, l.Reentry, dash(l.Mode), acquired, expires)
		}
	}
	if st.limited {
		fmt.Fprintf(tw, "(probed the first %d rows without a live lease for transaction holds; name a lock to probe it)\n", dialect.TxProbeLimitDefault)
	}
	if len(st.waiters) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "WAITING FOR\tPOSITION\tOWNER\tWAITING")
		for _, w := range st.waiters {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", w.Name, w.Position, w.Owner, human(w.Now.Sub(w.CreatedAt)))
		}
	}
	if len(st.free) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "free: %s\n", strings.Join(st.free, ", "))
	}
	if len(st.unknown) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "unknown: %s (%s)\n", strings.Join(st.unknown, ", "), st.unchecked)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ago formats a past duration for people: "12s ago".
func ago(d time.Duration) string { return human(d) + " ago" }

// human formats a duration for people at second resolution: 850ms, 12s,
// 4m12s, 3h5m, 2d4h.
func human(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}
