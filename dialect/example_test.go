package dialect_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dblock-go/dblock/dialect"
	_ "github.com/dblock-go/dblock/dialect/sqlite" // The example runs on an SQLite file.
	"github.com/dblock-go/dblock/migrations"
	"github.com/dblock-go/dblock/optimistic"
)

// open is the package doc's example, word for word.
func open(ctx context.Context, dsn string) error {
	db, err := dialect.Open(ctx, dsn) // postgres://…, mysql://…, sqlite://…
	if err != nil {
		return err
	}
	defer db.Close()
	locker, err := optimistic.New(db, nil)
	if err != nil {
		return err
	}
	defer locker.Close()
	fmt.Println("kind:", db.Kind())
	if err := migrations.Up(ctx, db); err != nil {
		return err
	}
	lease, err := locker.TryAcquire(ctx, "report")
	if err != nil {
		return err
	}
	fmt.Println("token:", lease.Token())
	return lease.Release(ctx)
}

// Open a database from a DSN and lock a name on it.
func Example() {
	dir, err := os.MkdirTemp("", "dblock-dialect")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	if err := open(context.Background(), "sqlite://"+filepath.Join(dir, "locks.db")); err != nil {
		fmt.Println(err)
	}
	// Output:
	// kind: sqlite
	// token: 1
}
