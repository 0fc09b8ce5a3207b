package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/dblock-go/dblock"
	_ "github.com/dblock-go/dblock/dialect/mysql" // The CLI serves every database.
	_ "github.com/dblock-go/dblock/dialect/postgres"
	_ "github.com/dblock-go/dblock/dialect/sqlite"
	"github.com/dblock-go/dblock/internal/store"
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

// envLog names the environment variable that turns the library's log on.
const envLog = "DBLOCK_LOG"

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
	// logger receives the library's log: discarded unless $DBLOCK_LOG
	// names a level, so that errors stay one line on stderr.
	logger *slog.Logger
}

const mainUsage = `dblock: distributed locks on PostgreSQL, MySQL/MariaDB and SQLite.

Usage:
  dblock [--dsn DSN] COMMAND [FLAGS] [ARGS]

Commands:
  migrate up|down|status      apply, roll back one step of, or list the migrations
  exec --lock NAME -- CMD     run CMD while holding the lock NAME
  status [--json] [NAME...]   list held locks and fair-queue waiters
  release --lock NAME --force free a lock whoever holds it (administrators only)
  leader [--watch] NAME       print the leader of an election (package election)
  history [NAME]              who held which lock and how it ended (--enable first)
  reaper                      free expired leases and dead waiters on a schedule

Global flags:
  --version   print the version and exit (also: dblock version)
  --dsn DSN   database to use (before or after COMMAND); also $DBLOCK_DSN;
              default sqlite://dblock.db
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

Environment:
  DBLOCK_DSN  the database, when --dsn is not given
  DBLOCK_LOG  debug, info, warn or error: print the library's log at that
              level on stderr (off by default: errors are one line)

Exit codes: 0 ok (exec: CMD's status), 1 error, 64 bad usage, 69 database
unreachable, 75 lock not acquired (release: held by a transaction; leader: no leader), 76 lock
lost, 78 run "dblock migrate up", 126/127 CMD not runnable/not found, 128+N
killed by signal N.

Run "dblock help COMMAND" or "dblock COMMAND --help" for a command's flags
and examples.
`

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	logger, err := newLogger(os.Getenv(envLog), stderr)
	if err != nil {
		return a.fail(err)
	}
	a.logger = logger
	fs := flag.NewFlagSet("dblock", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dsn := fs.String("dsn", "", "database DSN")
	showVersion := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, mainUsage)
			return exitOK
		}
		return a.fail(usageErrorf("%s (see dblock --help)", flagError(err)))
	}
	if *showVersion {
		fmt.Fprintln(stdout, version())
		return exitOK
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
	switch cmd {
	case "migrate":
		err = a.migrate(ctx, cmdArgs)
	case "exec":
		return a.exec(ctx, cmdArgs)
	case "status":
		err = a.status(ctx, cmdArgs)
	case "release":
		err = a.release(ctx, cmdArgs)
	case "leader":
		err = a.leader(ctx, cmdArgs)
	case "history":
		err = a.history(ctx, cmdArgs)
	case "reaper":
		err = a.reaper(ctx, cmdArgs)
	case "help":
		return a.help(cmdArgs)
	case "version":
		fmt.Fprintln(stdout, version())
		return exitOK
	default:
		err = usageErrorf("unknown command %q (want migrate, exec, status, release, leader, history or reaper; see dblock --help)", cmd)
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
//
// Every command also takes --dsn, with the meaning of the global one: the
// DSN given after the command wins over one given before it.
func (a *app) parseFlags(fs *flag.FlagSet, help string, args []string) (done bool, err error) {
	fs.SetOutput(io.Discard)
	dsn := fs.String("dsn", "", "database DSN")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(a.stdout, help)
			return true, nil
		}
		return true, usageErrorf("%s: %s (see dblock %s --help)", fs.Name(), flagError(err), fs.Name())
	}
	if *dsn != "" {
		a.dsn, a.dsnDefault = *dsn, false
	}
	return false, nil
}

// flagBare matches the flag package's "-name" in its messages.
var flagBare = regexp.MustCompile(`(defined: |for flag |flag needs an argument: )-([A-Za-z])`)

// flagError is a flag package error naming the flag as users type it:
// "--ttl", not "-ttl".
func flagError(err error) string {
	return flagBare.ReplaceAllString(err.Error(), "$1--$2")
}

// version is the module version this binary was built from (as go install
// records it; "(devel)" for a build from a work tree) and the Go version.
func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return "dblock " + v + " " + runtime.Version()
}

// help prints the usage of dblock, or of the command named in args.
func (a *app) help(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stdout, mainUsage)
		return exitOK
	}
	if len(args) > 1 {
		return a.fail(usageErrorf("help: want at most one command, got %q (see dblock --help)", strings.Join(args, " ")))
	}
	text, ok := commandHelp[args[0]]
	if !ok {
		return a.fail(usageErrorf("help: unknown command %q (want migrate, exec, status, release, leader, history or reaper)", args[0]))
	}
	fmt.Fprint(a.stdout, text)
	return exitOK
}

// commandHelp is each command's --help text.
var commandHelp = map[string]string{
	"migrate": migrateHelp,
	"exec":    execHelp,
	"status":  statusHelp,
	"release": releaseHelp,
	"leader":  leaderHelp,
	"history": historyHelp,
	"reaper":  reaperHelp,
}

// newLogger returns the logger of the library's log: off when level is
// empty, else text on w at level (debug, info, warn or error). It also sends
// the MySQL driver's own log lines there (or nowhere).
func newLogger(level string, w io.Writer) (*slog.Logger, error) {
	if level == "" {
		store.SetDriverLog(io.Discard)
		return slog.New(slog.DiscardHandler), nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("bad %s %q: want debug, info, warn or error", envLog, level)
	}
	store.SetDriverLog(w)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
