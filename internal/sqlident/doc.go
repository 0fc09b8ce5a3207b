// Package sqlident validates and quotes the identifiers of users' tables and
// columns, the one piece of SQL text dblock builds from user input: the
// module's only quoting rule, used by dialect and userrows alike.
package sqlident
