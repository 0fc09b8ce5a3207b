package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

const statusHelp = `Usage: dblock [--dsn DSN] status [--json] [NAME...]

Lists the held locks (name, owner, fencing token, reentry count, mode, when
acquired, when the lease expires), the fair-queue waiters (what each waits
for: exclusive, read, or a semaphore's permits; its queue position and how
long it has waited), the readers of names held for reading and
the grants of semaphores' permits. With NAMEs, only those locks; a NAME that
nobody holds is reported free, and a NAME that status could not check is
reported unknown, never free. Times come from the database clock.

A lease past its expiry that the reaper has not freed yet is shown as
"expired ... ago": anyone may take it.

A held name that a waiter of another process reserved (an optimistic or
rwlock write Acquire that found it held) gets a line "NAME: next for
OWNER": once freed, only that owner may take it until the reservation
lapses (JSON: "reserved_for", "reserved_waiting_since", "reserved_until",
absent without one).

A lock held in pessimistic mode is a running transaction's row lock and
writes no owner: status finds it with a locking read that never waits (SKIP
LOCKED; its own shared lock lasts one statement) and shows it with mode
pessimistic, no owner, no token (the holder's is not committed yet) and no
lease: it lasts until its transaction ends. With NAMEs, those names are
probed; without, up to 1000 rows that no live lease names (PostgreSQL: only
rows a lock has marked), in name order, and a note says when there were
more: name a lock to be sure.

When status cannot check for transaction holds, it says so and lists every
NAME that no live lease holds as unknown (table: a line "unknown: NAME, ...";
JSON: "unknown" and "checked": false). That happens when the server refuses
the locking read: PostgreSQL wants UPDATE on dblock_locks (MySQL 8: UPDATE,
DELETE or LOCK TABLES; MariaDB only SELECT), and a read-only session (a
PostgreSQL standby) takes no row locks; one line on stderr says which. On
SQLite a pessimistic hold is the database's write lock, which does not say
which name it is for: status says "database write-locked by a transaction",
and reports every NAME that no live lease holds as unknown (none can be
taken until the transaction ends). The exit status is 0 in all these cases:
test the output.

Flags:
  --json   print one JSON document instead of tables (see below)

JSON (stable; times are RFC 3339 UTC with microseconds, durations are
seconds as numbers, null when there is no value):
  {
    "format_version": 1,
    "now": "2026-01-02T15:04:05.000000Z",
    "write_locked": false,
    "checked": true,
    "unchecked_reason": null,
    "locks": [{"name": "...", "owner": "...", "token": 7, "reentry": 1,
               "mode": "optimistic", "acquired_at": "...", "expires_at": "...",
               "expires_in_seconds": 12.5, "expired": false, "metadata": "..."}],
    "waiters": [{"name": "...", "owner": "...", "kind": "exclusive", "position": 1, "id": 3,
                 "waiting_since": "...", "wait_seconds": 2.25,
                 "heartbeat_at": "...", "expires_at": "..."}],
    "free": ["names asked for that nobody holds"],
    "unknown": [{"name": "names asked for that status could not check",
                 "reason": "permission_denied"}],
    "readers": [{"name": "...", "owner": "...", "token": 9, "reentry": 1,
                 "acquired_at": "...", "expires_at": "..."}],
    "permits": [{"name": "...", "owner": "...", "token": 4, "permits": 2,
                 "acquired_at": "...", "expires_at": "..."}],
    "reserved": [{"name": "...", "reserved_for": "...",
                  "reserved_waiting_since": "...", "reserved_until": "..."}]
  }
A name held for reading (rwlock, dblock exec --read) is listed under "locks"
with "owner": "" and "mode": "read", until the last reader's lease ends; each
reader is listed under "readers". "permits" lists the grants of semaphores'
permits (dblock exec --semaphore), whose token is the grant's id.
"reserved" lists the names nobody holds that a waiting process keeps: until
"reserved_until" (about a second past the waiter's last look) only
"reserved_for" may take them, and they are never listed under "free"; a
held name's reservation is in its "locks" entry ("reserved_for", ...).
A transaction (pessimistic) hold has "mode": "pessimistic", "owner": "",
"token": null, "reentry": 0 and null times; "write_locked" is true when an
SQLite database is write-locked by a transaction ("now" is the database
clock, read when no row carried it). "checked" is false when "locks" may
miss transaction holds, and "unchecked_reason" then says why:
  permission_denied  this role may not lock rows of dblock_locks
  read_only          the session is read-only (a standby): no row locks
  write_locked       SQLite: a transaction holds the write lock of the file
  probe_limit        without NAMEs, more rows than status probes
"unknown" lists, with the same reason, each NAME that no live lease holds
while status could not check it (it may be free or held by a transaction;
an expired lease of it is still listed under "locks"); it is never listed
under "free".

Examples:
  dblock status
  dblock status nightly-report invoice:42
  dblock status --json | jq '.locks[] | {name, owner, expires_in_seconds}'
  dblock status --json invoice:42 | jq -e '.free == ["invoice:42"]'   # free, checked
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
	WriteLocked bool `json:"write_locked"`
	// Checked is false when Locks may miss transaction holds: the probe
	// for them was refused or limited, or (SQLite) a transaction holds the
	// write lock without naming a name. UncheckedReason then says why.
	Checked         bool          `json:"checked"`
	UncheckedReason *string       `json:"unchecked_reason"`
	Locks           []lockJSON    `json:"locks"`
	Waiters         []waiterJSON  `json:"waiters"`
	Free            []string      `json:"free"`
	Unknown         []unknownJSON `json:"unknown"`
	// Readers lists each reader's lease of a name held for reading (the
	// name's lock shows owner "" and mode read); Permits each grant of a
	// semaphore's permits.
	Readers []readerJSON `json:"readers"`
	Permits []permitJSON `json:"permits"`
	// Reserved lists the free names a waiter keeps (never under Free).
	Reserved []reservedJSON `json:"reserved"`
}

// unknownJSON is a name asked for that status could not check.
type unknownJSON struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
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
	// The owner a live reservation keeps the name for once freed (see
	// package optimistic), since when it waits and when the reservation
	// lapses; absent without one.
	ReservedFor   string `json:"reserved_for,omitempty"`
	WaitingSince  string `json:"reserved_waiting_since,omitempty"`
	ReservedUntil string `json:"reserved_until,omitempty"`
}

type waiterJSON struct {
	Name         string  `json:"name"`
	Owner        string  `json:"owner"`
	Kind         string  `json:"kind"`
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
	st, err := a.readStatus(ctx, db, names)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(buildStatus(st))
	}
	return a.printStatus(st)
}

// readStatus reads what status shows of names (everything without names):
// the locks, with the transaction holds a probe found, the waiters, the
// shared holds, the reserved free names, and the database clock.
func (a *app) readStatus(ctx context.Context, db *dialect.DB, names []string) (statusData, error) {
	rows, err := store.Of(db).ListLocks(ctx, names)
	if err != nil {
		return statusData{}, fmt.Errorf("status: %w", a.schemaError(err))
	}
	waiters, err := store.Of(db).ListWaiters(ctx, names)
	if err != nil {
		return statusData{}, fmt.Errorf("status: %w", a.schemaError(err))
	}
	tx, unchecked, err := a.probeTxHolds(ctx, db, names)
	if err != nil {
		return statusData{}, err
	}
	shared, err := readShared(ctx, store.Of(db), names)
	if err != nil {
		return statusData{}, fmt.Errorf("status: %w", a.schemaError(err))
	}
	reserved, err := store.Of(db).ListReserved(ctx, names)
	if err != nil {
		return statusData{}, fmt.Errorf("status: %w", a.schemaError(err))
	}
	now, err := statusClock(ctx, db, rows, waiters)
	if err != nil {
		return statusData{}, err
	}
	st := statusData{
		now: now, locks: mergeTxHolds(now, rows, tx), waiters: waiters,
		writeLocked: tx.WriteLocked, unchecked: unchecked, shared: shared, reserved: reserved,
	}
	if unchecked != "" {
		st.unknown = uncheckedNames(names, rows)
	}
	st.free = freeNames(names, st)
	return st, nil
}

// statusClock is the database clock as the rows read it, or read apart
// when none came back.
func statusClock(ctx context.Context, db *dialect.DB, rows []store.LockRow, waiters []store.WaiterRow) (time.Time, error) {
	switch {
	case len(rows) > 0:
		return rows[0].Now, nil
	case len(waiters) > 0:
		return waiters[0].Now, nil
	}
	now, err := store.Of(db).ClockNow(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("status: read the database clock: %w", err)
	}
	return now, nil
}

// Why status could not check every name for a transaction hold: the
// stable values of unchecked_reason in status --json.
const (
	uncheckedDenied      = "permission_denied"
	uncheckedReadOnly    = "read_only"
	uncheckedWriteLocked = "write_locked"
	uncheckedLimit       = "probe_limit"
)

// uncheckedText says for people why transaction holds were not all checked.
var uncheckedText = map[string]string{
	uncheckedDenied:      "this role may not lock rows of dblock_locks (PostgreSQL: grant it UPDATE)",
	uncheckedReadOnly:    "the session is read-only (a standby?), and a read-only transaction takes no row locks",
	uncheckedWriteLocked: "the database is write-locked by a transaction, which does not say which name it holds",
	uncheckedLimit:       fmt.Sprintf("probed the first %d rows without a live lease for transaction holds; name a lock to probe it", store.TxProbeLimitDefault),
}

// probeTxHolds probes names (or, without names, the rows no live lease
// names) for transaction holds, and says why when it could not check them
// all. A probe the server refuses for want of a privilege or in a read-only
// session leaves every name unchecked, with one line on stderr.
func (a *app) probeTxHolds(ctx context.Context, db *dialect.DB, names []string) (store.TxHolds, string, error) {
	tx, err := store.Of(db).ProbeTxHolds(ctx, names, store.TxProbeLimitDefault)
	switch {
	case store.PermissionDenied(err):
		a.errorLine(fmt.Errorf("status: transaction (pessimistic) holds not shown: this role may not lock rows of dblock_locks (PostgreSQL: grant it UPDATE): %w", err))
		return store.TxHolds{}, uncheckedDenied, nil
	case store.ReadOnlyRefused(err):
		a.errorLine(fmt.Errorf("status: transaction (pessimistic) holds not shown: the session is read-only: %w", err))
		return store.TxHolds{}, uncheckedReadOnly, nil
	case err != nil:
		return store.TxHolds{}, "", fmt.Errorf("status: probe for transaction holds: %w", a.schemaError(err))
	case tx.WriteLocked:
		return tx, uncheckedWriteLocked, nil
	case tx.Limited:
		return tx, uncheckedLimit, nil
	}
	return tx, "", nil
}

// statusData is what status found.
type statusData struct {
	now         time.Time // The database clock.
	locks       []lockEntry
	waiters     []store.WaiterRow
	free        []string
	unknown     []string // Names asked for that could not be checked.
	writeLocked bool     // SQLite: a transaction holds the write lock.
	// unchecked says why transaction holds were not all checked (one of
	// the unchecked* values), or is empty.
	unchecked string
	shared    sharedHolds // Readers' leases and semaphore grants.
	// reserved are the free names kept for a waiter (status_reserved.go).
	reserved []store.LockRow
}

// lockEntry is a held lock: a lease row, or a transaction hold (tx), which
// has a name and nothing else.
type lockEntry struct {
	store.LockRow
	tx bool
}

// mergeTxHolds returns the held locks: the lease rows, with the transaction
// holds the probe found in place of any expired lease row of the same name,
// in name order.
func mergeTxHolds(now time.Time, rows []store.LockRow, tx store.TxHolds) []lockEntry {
	held := map[string]bool{}
	for _, n := range tx.Names {
		held[n] = true
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
		out = append(out, lockEntry{LockRow: store.LockRow{Name: n, Mode: dblock.ModePessimistic, Now: now}, tx: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// uncheckedNames returns the asked-for names that no live lease holds, in
// the order given, without duplicates: when transaction holds could not be
// checked, each of them may be held by one.
func uncheckedNames(names []string, rows []store.LockRow) []string {
	seen := map[string]bool{}
	for _, r := range rows {
		if !r.Expired() {
			seen[r.Name] = true
		}
	}
	var out []string
	for _, n := range names {
		if !seen[n] {
			out = append(out, n)
			seen[n] = true
		}
	}
	return out
}

// freeNames returns the asked-for names that nobody holds, waits for or
// keeps (a reservation), and that were checked (not in st.unknown), in the
// order given, without duplicates.
func freeNames(names []string, st statusData) []string {
	busy := map[string]bool{}
	for _, l := range st.locks {
		busy[l.Name] = true
	}
	for _, w := range st.waiters {
		busy[w.Name] = true
	}
	for _, n := range st.unknown {
		busy[n] = true
	}
	free := []string{}
	for _, n := range names {
		if !busy[n] && !st.shared.busy(n) && !isReserved(st.reserved, n) {
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
		Checked:       st.unchecked == "",
		Locks:         []lockJSON{},
		Waiters:       []waiterJSON{},
		Free:          st.free,
		Unknown:       []unknownJSON{},
		Reserved:      reservedJSONOf(st.reserved),
	}
	doc.Readers, doc.Permits = st.shared.json()
	if st.unchecked != "" {
		reason := st.unchecked
		doc.UncheckedReason = &reason
	}
	for _, n := range st.unknown {
		doc.Unknown = append(doc.Unknown, unknownJSON{Name: n, Reason: st.unchecked})
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
		if l.Reserved() {
			j.ReservedFor = l.Next.Owner
			j.WaitingSince, j.ReservedUntil = l.Next.Since.UTC().Format(jsonTime), l.Next.Until.UTC().Format(jsonTime)
		}
		doc.Locks = append(doc.Locks, j)
	}
	for _, w := range st.waiters {
		doc.Waiters = append(doc.Waiters, waiterJSON{
			Name: w.Name, Owner: w.Owner, Kind: string(w.Kind), Position: w.Position, ID: w.ID,
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
			owner := l.Owner
			if owner == "" && l.Mode == dblock.ModeRead {
				owner = "(readers)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", l.Name, owner, l.Token, l.Reentry, dash(l.Mode), acquired, expires)
		}
	}
	printReservations(tw, st.locks)
	printReservedFree(tw, st.reserved)
	switch st.unchecked {
	case "", uncheckedWriteLocked: // The first line said it.
	case uncheckedLimit:
		fmt.Fprintf(tw, "(%s)\n", uncheckedText[st.unchecked])
	default:
		fmt.Fprintf(tw, "(transaction holds not checked: %s)\n", uncheckedText[st.unchecked])
	}
	if len(st.waiters) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "WAITING FOR\tKIND\tPOSITION\tOWNER\tWAITING")
		for _, w := range st.waiters {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", w.Name, w.Kind, w.Position, w.Owner, human(w.Now.Sub(w.CreatedAt)))
		}
	}
	st.shared.print(tw, st)
	if len(st.free) > 0 || len(st.unknown) > 0 {
		fmt.Fprintln(tw)
	}
	if len(st.free) > 0 {
		fmt.Fprintf(tw, "free: %s\n", strings.Join(st.free, ", "))
	}
	if len(st.unknown) > 0 {
		// Never "free": a transaction may hold any of them.
		fmt.Fprintf(tw, "unknown: %s (not checked for a transaction hold: %s)\n", strings.Join(st.unknown, ", "), uncheckedText[st.unchecked])
	}
	return tw.Flush()
}

// printReservations lists the held names that a waiter reserved for when
// they are freed (see package optimistic), if any.
func printReservations(tw io.Writer, locks []lockEntry) {
	for _, l := range locks {
		if !l.tx && l.Reserved() {
			fmt.Fprintf(tw, "%s: next for %s (waiting %s; reservation lapses in %s unless renewed)\n",
				l.Name, l.Next.Owner, human(l.Now.Sub(l.Next.Since)), human(l.Next.Until.Sub(l.Now)))
		}
	}
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
