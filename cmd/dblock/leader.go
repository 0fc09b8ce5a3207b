package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/election"
)

const leaderHelp = `Usage: dblock [--dsn DSN] leader [--watch] [--interval DUR] [--json] NAME

Prints the leader of the election NAME (package election): its value,
its term (the fencing token of its lease), when the term began and when
it expires unless renewed, by the database clock. With --watch it prints
the leader, then every change (a new term, or a new value proclaimed), one
line each, until interrupted; terms only go up, and one that came and went
between two reads may be skipped.

Exit status: 0 when a leader is printed (and after --watch is
interrupted); 75 when the election has no leader (without --watch); 64 on
bad usage.

Flags:
  --watch          print every change until interrupted
  --interval DUR   how often --watch reads the leader (default 1s)
  --json           print each leader as one JSON object per line:
                   {"name", "value", "term", "since", "expires_at"}

Examples:
  dblock leader billing-scheduler
  dblock leader --watch --json billing-scheduler | jq -r .value
`

// leaderLine is a leader as --json prints it.
type leaderLine struct {
	Name      string    `json:"name"`
	Value     string    `json:"value"`
	Term      int64     `json:"term"`
	Since     time.Time `json:"since"`
	ExpiresAt time.Time `json:"expires_at"`
}

// leaderCmd is one `dblock leader` invocation.
type leaderCmd struct {
	a        *app
	name     string
	watch    bool
	interval time.Duration
	json     bool
}

func (a *app) leader(ctx context.Context, args []string) error {
	c := &leaderCmd{a: a}
	fs := flag.NewFlagSet("leader", flag.ContinueOnError)
	fs.BoolVar(&c.watch, "watch", false, "print every change")
	fs.DurationVar(&c.interval, "interval", time.Second, "read interval of --watch")
	fs.BoolVar(&c.json, "json", false, "JSON lines")
	if done, err := a.parseFlags(fs, leaderHelp, args); done {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("leader: want one election NAME (see dblock leader --help)")
	}
	c.name = fs.Arg(0)
	if err := dblock.ValidateName(c.name); err != nil {
		return withCode(exitUsage, fmt.Errorf("leader: %w", err))
	}
	if c.interval <= 0 {
		return usageErrorf("leader: --interval must be positive, got %v", c.interval)
	}
	db, err := a.open(ctx, schemaRequired)
	if err != nil {
		return err
	}
	defer db.Close()
	e, err := election.New(db, c.name, &election.Config{ObserveInterval: c.interval, Logger: a.logger})
	if err != nil {
		return withCode(exitUsage, fmt.Errorf("leader: %w", err))
	}
	defer e.Close()
	if c.watch {
		return c.follow(ctx, e)
	}
	return c.once(ctx, e)
}

// once prints the current leader.
func (c *leaderCmd) once(ctx context.Context, e *election.Election) error {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	l, err := e.Leader(ctx)
	if errors.Is(err, election.ErrNoLeader) {
		return withCode(exitNotAcquired, fmt.Errorf("leader: %q has no leader", c.name))
	}
	if err != nil {
		return fmt.Errorf("leader %q: %w", c.name, c.a.schemaError(err))
	}
	return c.print(l)
}

// follow prints the leaders Observe streams until interrupted.
func (c *leaderCmd) follow(ctx context.Context, e *election.Election) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	for l := range e.Observe(ctx) {
		if err := c.print(l); err != nil {
			return err
		}
	}
	return nil
}

// print writes one leader, as text or as a JSON line.
func (c *leaderCmd) print(l election.Leader) error {
	if c.json {
		return json.NewEncoder(c.a.stdout).Encode(leaderLine{Name: c.name, Value: l.Value, Term: int64(l.Term),
			Since: l.Since.UTC(), ExpiresAt: l.ExpiresAt.UTC()})
	}
	_, err := fmt.Fprintf(c.a.stdout, "%q: leader %q, term %d, since %s, expires %s\n", c.name, l.Value, l.Term,
		l.Since.UTC().Format(time.RFC3339Nano), l.ExpiresAt.UTC().Format(time.RFC3339Nano))
	return err
}
