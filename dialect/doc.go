// Package dialect is dblock's front door: it opens the database the locks
// live in. Every lock package (optimistic, pessimistic, fairqueue, reaper,
// migrations, userrows) takes the *DB it returns.
//
// Import the package of each database the program uses, for its driver, as
// database/sql drivers are imported; a program links only those:
//
//	import (
//		"github.com/dblock-go/dblock/dialect"
//		_ "github.com/dblock-go/dblock/dialect/postgres" // or dialect/mysql, dialect/sqlite
//	)
//
// Then open the database and hand it to a Locker:
//
//	db, err := dialect.Open(ctx, dsn) // postgres://…, mysql://…, sqlite://…
//	if err != nil {
//		return err
//	}
//	defer db.Close()
//	locker, err := optimistic.New(db, nil)
//
// Three ways in: Open with a DSN (the pool is dblock's), New with a
// *sql.DB the application keeps, and postgres.FromPool with a
// *pgxpool.Pool. DB.SQL returns the *sql.DB for the application's own
// statements.
//
// This package's API is stable: it follows semantic versioning with the
// rest of the module.
package dialect
