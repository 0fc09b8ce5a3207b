// Package exampledb opens the database the packages' runnable examples use:
// a migrated SQLite file in a temporary directory, so that every example runs
// with no server and prints its documented output.
package exampledb
