package postgres

import "context"

// Bounded is bounded, for the tests of package postgres_test.
var Bounded = bounded

// StdlibConn is stdlibConn, for the tests of package postgres_test.
var StdlibConn = stdlibConn

// CloseUnder closes pgx's connection under dc, a connection of a pool open
// opened, leaving a deferred BEGIN unsent.
func CloseUnder(ctx context.Context, dc any) error {
	return dc.(*lazyConn).stdConn.Conn().Close(ctx)
}
