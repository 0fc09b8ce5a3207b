// Package sqlite brings SQLite to dblock through modernc.org/sqlite (pure
// Go, no cgo): import it for its side effect and dialect.Open accepts
// sqlite://path and file:path DSNs. It is the zero-setup default: one file,
// shared by the processes of one host.
//
//	import _ "github.com/dblock-go/dblock/dialect/sqlite"
package sqlite
