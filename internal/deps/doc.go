// Package deps holds the tests that keep a program's dependencies to what it
// uses: the lock packages link no database driver (each database's package
// under dialect/ brings its own), and the smallest dblock program on
// PostgreSQL stays close in size to a program that uses pgxpool alone.
package deps
