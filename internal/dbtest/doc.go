// Package dbtest gives tests real, isolated databases: a fresh PostgreSQL
// schema, a fresh MySQL/MariaDB database or a fresh SQLite file per call,
// migrated and dropped at cleanup.
//
// Servers come from DBLOCK_TEST_POSTGRES and DBLOCK_TEST_MYSQL, or the local
// default ports. When a server cannot be reached the test fails under CI=true
// and is skipped, with the reason printed, otherwise.
package dbtest
