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
// Errors are one line on stderr. The library's own log (and the MySQL
// driver's) is off unless $DBLOCK_LOG names a level: debug, info, warn or
// error; it then goes to stderr too. (The reaper logs as it always does.)
//
// Exit codes:
//
//	0    success (exec: CMD's own status is passed through)
//	1    any other error
//	64   bad usage: unknown command or flag, bad flag value, bad DSN
//	69   the database cannot be reached
//	75   exec: the lock was not acquired (held by another owner, or --wait ran out);
//	     release: the name is held by a transaction, which only ending it can free
//	76   exec: the lock was lost while CMD ran (CMD was sent SIGTERM)
//	78   the dblock tables are missing: run dblock migrate up
//	126  exec: CMD could not be run; 127: CMD was not found
//	128+N  exec: CMD was killed by signal N, or dblock was interrupted by it while waiting
package main
