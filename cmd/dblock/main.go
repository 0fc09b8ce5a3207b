// Command dblock is the command-line interface of dblock: distributed locks on
// the SQL database an application already runs (PostgreSQL, MySQL/MariaDB, or
// an SQLite file).
//
//	dblock [--dsn DSN] COMMAND [FLAGS] [ARGS]
//
//	migrate up|down|status   apply, roll back one step of, or list the migrations
//	exec --lock NAME -- CMD  run CMD while holding NAME (like flock(1), across hosts)
//	status [--json] [NAME]   list held locks and fair-queue waiters
//	release --lock NAME --force
//	                         free a lock whoever holds it (administrators only)
//	reaper                   free expired leases and dead waiters on a schedule
//
// The DSN comes from --dsn, else $DBLOCK_DSN, else the SQLite file ./dblock.db,
// which is migrated automatically on first use.
//
// Exit codes:
//
//	0    success (exec: CMD's own status is passed through)
//	1    any other error
//	64   bad usage: unknown command or flag, bad flag value, bad DSN
//	69   the database cannot be reached
//	75   exec: the lock was not acquired (held by another owner, or --wait ran out)
//	76   exec: the lock was lost while CMD ran (CMD was sent SIGTERM)
//	78   the dblock tables are missing: run dblock migrate up
//	126  exec: CMD could not be run; 127: CMD was not found
//	128+N  exec: CMD was killed by signal N, or dblock was interrupted by it while waiting
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dblock-go/dblock"
)

// Exit codes; see the package documentation. 64, 69, 75, 76 and 78 are the
// sysexits.h values (EX_USAGE, EX_UNAVAILABLE, EX_TEMPFAIL, EX_PROTOCOL,
// EX_CONFIG), so schedulers that know them retry 69 and 75.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 64
	exitUnavailable = 69
	exitNotAcquired = 75
	exitLost        = 76
	exitSchema      = 78
	exitCannotRun   = 126
	exitNotFound    = 127
)

// envDSN names the environment variable holding the DSN.
const envDSN = "DBLOCK_DSN"

// defaultDSN is the DSN used when neither --dsn nor $DBLOCK_DSN is set.
const defaultDSN = "sqlite://dblock.db"

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// app is one invocation's shared state.
type app struct {
	dsn        string // The DSN to open.
	dsnDefault bool   // The DSN is the built-in SQLite default.
	stdout     io.Writer
	stderr     io.Writer
}

const mainUsage = `dblock: distributed locks on PostgreSQL, MySQL/MariaDB and SQLite.

Usage:
  dblock [--dsn DSN] COMMAND [FLAGS] [ARGS]

Commands:
  migrate up|down|status      apply, roll back one step of, or list the migrations
  exec --lock NAME -- CMD     run CMD while holding the lock NAME
  status [--json] [NAME...]   list held locks and fair-queue waiters
  release --lock NAME --force free a lock whoever holds it (administrators only)
  reaper                      free expired leases and dead waiters on a schedule

Global flags:
  --dsn DSN   database to use; also $DBLOCK_DSN; default sqlite://dblock.db
              (that default file is created and migrated on first use)
              postgres://user:pass@host:5432/db?sslmode=disable
              mysql://user:pass@tcp(host:3306)/db
              sqlite://path/to/file.db   or   file:path/to/file.db

Examples:
  dblock exec --lock hello -- echo "I hold the lock"
  export DBLOCK_DSN='postgres://app@db:5432/app?sslmode=disable'
  dblock migrate up
  dblock exec --lock nightly-report --wait 0 -- ./report.sh
  dblock status

Exit codes: 0 ok (exec: CMD's status), 1 error, 64 bad usage, 69 database
unreachable, 75 lock not acquired, 76 lock lost, 78 run "dblock migrate up",
126/127 CMD not runnable/not found, 128+N killed by signal N.

Run "dblock COMMAND --help" for a command's flags and examples.
`

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("dblock", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dsn := fs.String("dsn", "", "database DSN")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, mainUsage)
			return exitOK
		}
		return a.fail(usageErrorf("%v (see dblock --help)", err))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return exitUsage
	}
	switch {
	case *dsn != "":
		a.dsn = *dsn
	case os.Getenv(envDSN) != "":
		a.dsn = os.Getenv(envDSN)
	default:
		a.dsn, a.dsnDefault = defaultDSN, true
	}
	cmd, cmdArgs := rest[0], rest[1:]
	var err error
	switch cmd {
	case "migrate":
		err = a.migrate(ctx, cmdArgs)
	case "exec":
		return a.exec(ctx, cmdArgs)
	case "status":
		err = a.status(ctx, cmdArgs)
	case "release":
		err = a.release(ctx, cmdArgs)
	case "reaper":
		err = a.reaper(ctx, cmdArgs)
	case "help":
		fmt.Fprint(stdout, mainUsage)
		return exitOK
	default:
		err = usageErrorf("unknown command %q (want migrate, exec, status, release or reaper; see dblock --help)", cmd)
	}
	if err != nil {
		return a.fail(err)
	}
	return exitOK
}

// exitError carries an exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf returns an error that exits 64.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// withCode returns err with an exit code attached.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// exitCode maps an error to its exit code.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, dblock.ErrInvalidOption), errors.Is(err, dblock.ErrInvalidName):
		return exitUsage
	case errors.Is(err, dblock.ErrSchemaMissing):
		return exitSchema
	case errors.Is(err, dblock.ErrUnavailable):
		return exitUnavailable
	case errors.Is(err, dblock.ErrNotAcquired):
		return exitNotAcquired
	case errors.Is(err, dblock.ErrLost):
		return exitLost
	}
	return exitFailure
}

// fail prints err as one line on stderr and returns its exit code.
func (a *app) fail(err error) int {
	a.errorLine(err)
	return exitCode(err)
}

// errorLine prints err as one line, prefixed once with "dblock: ".
func (a *app) errorLine(err error) {
	fmt.Fprintln(a.stderr, oneLine(err.Error()))
}

// oneLine formats msg as a single "dblock: ..." line: the package prefix the
// sentinels carry appears once, and line breaks become "; ".
func oneLine(msg string) string {
	msg = strings.ReplaceAll(msg, "dblock: ", "")
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", " ; ")), " ")
	msg = strings.ReplaceAll(msg, " ; ", "; ")
	return "dblock: " + msg
}

// parseFlags parses args with fs, printing help to stdout on --help. It
// returns done=true when the command should stop (help shown) and an error
// that exits 64 on bad flags.
func (a *app) parseFlags(fs *flag.FlagSet, help string, args []string) (done bool, err error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(a.stdout, help)
			return true, nil
		}
		return true, usageErrorf("%s: %v (see dblock %s --help)", fs.Name(), err, fs.Name())
	}
	return false, nil
}
