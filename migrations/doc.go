// Package migrations holds dblock's goose SQL migrations, one directory per
// dialect, embedded for programmatic use. They are plain goose files, so the
// goose CLI applies them too:
//
//	goose -dir migrations/postgres -table dblock_db_version postgres "$DSN" up
//
// dblock keeps its own version table (dblock_db_version), so its history never
// mixes with an application's goose_db_version.
package migrations
