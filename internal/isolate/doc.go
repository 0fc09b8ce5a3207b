// Package isolate gives a test a database of its own on a shared server: a
// schema on PostgreSQL, a database on MySQL, a file on SQLite, dropped when
// the test ends. internal/dbtest (dblock's own tests) and dblocktest (the
// users' kit) build on it. It imports no driver: the callers import the
// dialect packages of the databases they use.
package isolate
