package store

import "context"

// A transaction begun with a context from WithDeferredBegin on a pool whose
// driver connections support it (PostgreSQL's on the pools Open and
// postgres.FromPool make: see DeferBegins; MariaDB's on the pools Open
// makes, for a checked transaction: see lockbegin.go) sends no BEGIN at
// BeginTx: the driver sends it with the transaction's first statement, in
// the same round trip when that statement goes through Native.QueryRowOn
// or ExecOn (a pessimistic hold's lock statement; on MariaDB the lock is a
// call that begins the transaction itself), and before it otherwise. A
// transaction that ends before any statement sends nothing at all.

type deferredBeginKey struct{}

// WithDeferredBegin returns ctx marked for BeginTx: the transaction's BEGIN
// goes with its first statement (see DefersBegin).
func WithDeferredBegin(ctx context.Context) context.Context {
	return context.WithValue(ctx, deferredBeginKey{}, true)
}

// DeferredBegin reports whether ctx was marked by WithDeferredBegin.
func DeferredBegin(ctx context.Context) bool {
	v, _ := ctx.Value(deferredBeginKey{}).(bool)
	return v
}

// DefersBegin reports whether a transaction begun on db with a context from
// WithDeferredBegin sends its BEGIN with its first statement.
// On MySQL that is MariaDB's holds only, whose commit is checked (see
// lockbegin.go).
func (db *DB) DefersBegin() bool {
	return db.defersBegin && (db.Dialect.Kind() != MySQL || db.ChecksCommit())
}

// DeferBegins marks db's pool as one whose driver connections defer BEGIN
// where asked (see WithDeferredBegin). Open marks its pools where the
// driver says so (Driver.DeferredBegin); a driver's package calls it for a
// pool of its own making over the caller's (postgres.FromPool).
func (db *DB) DeferBegins() { db.defersBegin = true }
