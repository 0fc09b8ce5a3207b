package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
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
"expired ... ago": anyone may take it. Locks held in pessimistic mode are
row locks of a running transaction and write no owner, so they are not
listed (the database's own views show them: pg_locks, performance_schema).

Flags:
  --json   print one JSON document instead of tables (see below)

JSON (stable; times are RFC 3339 UTC with microseconds, durations are
seconds as numbers, null when there is no value):
  {
    "format_version": 1,
    "now": "2026-01-02T15:04:05.000000Z",
    "locks": [{"name": "...", "owner": "...", "token": 7, "reentry": 1,
               "mode": "optimistic", "acquired_at": "...", "expires_at": "...",
               "expires_in_seconds": 12.5, "expired": false, "metadata": "..."}],
    "waiters": [{"name": "...", "owner": "...", "position": 1, "id": 3,
                 "waiting_since": "...", "wait_seconds": 2.25,
                 "heartbeat_at": "...", "expires_at": "..."}],
    "free": ["names asked for that nobody holds"]
  }

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
	FormatVersion int          `json:"format_version"`
	Now           string       `json:"now"`
	Locks         []lockJSON   `json:"locks"`
	Waiters       []waiterJSON `json:"waiters"`
	Free          []string     `json:"free"`
}

type lockJSON struct {
	Name             string   `json:"name"`
	Owner            string   `json:"owner"`
	Token            int64    `json:"token"`
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
	locks, err := db.ListLocks(ctx, names)
	if err != nil {
		return fmt.Errorf("status: %w", a.schemaError(err))
	}
	waiters, err := db.ListWaiters(ctx, names)
	if err != nil {
		return fmt.Errorf("status: %w", a.schemaError(err))
	}
	now := time.Now().UTC()
	switch {
	case len(locks) > 0:
		now = locks[0].Now
	case len(waiters) > 0:
		now = waiters[0].Now
	}
	free := freeNames(names, locks, waiters)
	doc := buildStatus(now, locks, waiters, free)
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	return a.printStatus(now, locks, waiters, free)
}

// freeNames returns the asked-for names that nobody holds or waits for, in
// the order given, without duplicates.
func freeNames(names []string, locks []dialect.LockRow, waiters []dialect.WaiterRow) []string {
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

func buildStatus(now time.Time, locks []dialect.LockRow, waiters []dialect.WaiterRow, free []string) statusJSON {
	doc := statusJSON{
		FormatVersion: 1,
		Now:           now.UTC().Format(jsonTime),
		Locks:         []lockJSON{},
		Waiters:       []waiterJSON{},
		Free:          free,
	}
	for _, l := range locks {
		j := lockJSON{
			Name: l.Name, Owner: l.Owner, Token: l.Token, Reentry: l.Reentry, Mode: l.Mode,
			Expired: l.Expired(), Metadata: l.Metadata,
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
	for _, w := range waiters {
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

func (a *app) printStatus(now time.Time, locks []dialect.LockRow, waiters []dialect.WaiterRow, free []string) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if len(locks) == 0 {
		fmt.Fprintln(tw, "no locks held")
	} else {
		fmt.Fprintln(tw, "LOCK\tOWNER\tTOKEN\tREENTRY\tMODE\tACQUIRED\tEXPIRES")
		for _, l := range locks {
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
	if len(waiters) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "WAITING FOR\tPOSITION\tOWNER\tWAITING")
		for _, w := range waiters {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", w.Name, w.Position, w.Owner, human(w.Now.Sub(w.CreatedAt)))
		}
	}
	if len(free) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintf(tw, "free: %s\n", strings.Join(free, ", "))
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
