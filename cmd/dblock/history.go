package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/history"
)

const historyHelp = `Usage: dblock [--dsn DSN] history [--since DUR] [--limit N] [--json] [NAME]
       dblock [--dsn DSN] history --enable | --disable

Prints who held which lock and how each acquisition ended (package
history), newest first: NAME's, or every name's. Times are the database's.
An acquisition ends released, expired (freed by the reaper, or released too
late), taken_over (another owner took the name after the lease ran out),
force_released (dblock release --force), or, for a pessimistic hold,
connection_lost (its session ended) or aborted (the server rolled its
transaction back). Readers of a read-write lock and semaphore grants have an
entry each. The history is opt-in: --enable starts recording (triggers
write each lease's entry in the statement that ends it; a pessimistic
Locker writes its holds' entries), --disable stops it
and keeps the entries; "dblock reaper --history-retention DUR" prunes them.
PostgreSQL, MariaDB and SQLite keep a history; MySQL 8 does not.

Flags:
  --since DUR   only the acquisitions that ended within DUR (default: any time)
  --limit N     at most N entries (default 100)
  --json        one JSON object per line: {"name", "owner", "token", "mode",
                "acquired_at", "ended_at", "ended", "metadata"}
  --enable      start recording
  --disable     stop recording

Examples:
  dblock history --enable
  dblock history --since 24h invoice:42
  dblock history --json --limit 1000 | jq 'select(.ended != "released")'
`

// historyLine is an entry as --json prints it.
type historyLine struct {
	Name       string    `json:"name"`
	Owner      string    `json:"owner"`
	Token      int64     `json:"token"`
	Mode       string    `json:"mode"`
	AcquiredAt time.Time `json:"acquired_at"`
	EndedAt    time.Time `json:"ended_at"`
	Ended      string    `json:"ended"`
	Metadata   string    `json:"metadata,omitempty"`
}

// historyCmd is one `dblock history` invocation.
type historyCmd struct {
	a               *app
	q               history.Query
	json            bool
	enable, disable bool
}

func (a *app) history(ctx context.Context, args []string) error {
	c := &historyCmd{a: a}
	fs := flag.NewFlagSet("history", flag.ContinueOnError)
	fs.DurationVar(&c.q.Since, "since", 0, "only entries that ended within DUR")
	fs.IntVar(&c.q.Limit, "limit", history.LimitDefault, "at most N entries")
	fs.BoolVar(&c.json, "json", false, "JSON lines")
	fs.BoolVar(&c.enable, "enable", false, "start recording")
	fs.BoolVar(&c.disable, "disable", false, "stop recording")
	if done, err := a.parseFlags(fs, historyHelp, args); done {
		return err
	}
	if err := c.check(fs); err != nil {
		return err
	}
	db, err := a.open(ctx, schemaRequired)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	switch {
	case c.enable:
		return c.switchTo(ctx, db, true)
	case c.disable:
		return c.switchTo(ctx, db, false)
	}
	return c.list(ctx, db)
}

// check refuses bad flags and arguments before the database is opened.
func (c *historyCmd) check(fs *flag.FlagSet) error {
	switch {
	case c.enable && c.disable:
		return usageErrorf("history: --enable and --disable exclude each other")
	case (c.enable || c.disable) && fs.NArg() > 0:
		return usageErrorf("history: --enable and --disable take no NAME")
	case fs.NArg() > 1:
		return usageErrorf("history: want at most one NAME (see dblock history --help)")
	case c.q.Since < 0:
		return usageErrorf("history: --since must not be negative, got %v", c.q.Since)
	case c.q.Limit < 1 || c.q.Limit > history.LimitMax:
		return usageErrorf("history: --limit must be in [1, %d], got %d", history.LimitMax, c.q.Limit)
	}
	if fs.NArg() == 1 {
		c.q.Name = fs.Arg(0)
		if err := dblock.ValidateName(c.q.Name); err != nil {
			return withCode(exitUsage, fmt.Errorf("history: %w", err))
		}
	}
	return nil
}

// switchTo enables or disables the recording.
func (c *historyCmd) switchTo(ctx context.Context, db *dialect.DB, on bool) error {
	do, what := history.Disable, "disabled"
	if on {
		do, what = history.Enable, "enabled"
	}
	if err := do(ctx, db); err != nil {
		return c.a.schemaError(err)
	}
	_, err := fmt.Fprintf(c.a.stdout, "history %s\n", what)
	return err
}

// list prints the entries the query selects.
func (c *historyCmd) list(ctx context.Context, db *dialect.DB) error {
	entries, err := history.List(ctx, db, c.q)
	if err != nil {
		return c.a.schemaError(err)
	}
	for _, e := range entries {
		if err := c.print(e); err != nil {
			return err
		}
	}
	return nil
}

// print writes one entry, as text or as a JSON line.
func (c *historyCmd) print(e history.Entry) error {
	if c.json {
		return json.NewEncoder(c.a.stdout).Encode(historyLine{Name: e.Name, Owner: e.Owner, Token: int64(e.Token),
			Mode: e.Mode, AcquiredAt: e.AcquiredAt.UTC(), EndedAt: e.EndedAt.UTC(), Ended: e.Ended, Metadata: e.Metadata})
	}
	_, err := fmt.Fprintf(c.a.stdout, "%s  %-14s  %q  owner %q  token %d  %s  held %s\n",
		e.EndedAt.UTC().Format(time.RFC3339Nano), e.Ended, e.Name, e.Owner, e.Token, e.Mode,
		e.EndedAt.Sub(e.AcquiredAt).Round(time.Millisecond))
	return err
}
