package deps_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
)

// This test binary imports no database package, as a program that forgot
// to would: every DSN is refused with a message that names the import.
func TestOpenWithoutTheDatabasePackage(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ dsn, pkg string }{
		{"postgres://u:secret@127.0.0.1:1/db", "dialect/postgres"},
		{"host=127.0.0.1 dbname=db password=secret", "dialect/postgres"},
		{"mysql://u:secret@tcp(127.0.0.1:1)/db", "dialect/mysql"},
		{"sqlite://" + t.TempDir() + "/x.db", "dialect/sqlite"},
	} {
		db, err := dialect.Open(ctx, c.dsn)
		if db != nil || !errors.Is(err, dblock.ErrInvalidOption) {
			t.Fatalf("Open(%q) = %v, %v; want ErrInvalidOption", c.dsn, db, err)
		}
		if !strings.Contains(err.Error(), `import _ "github.com/dblock-go/dblock/`+c.pkg+`"`) {
			t.Errorf("Open(%q): %v; want the import to add", c.dsn, err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) echoes the password: %v", c.dsn, err)
		}
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := dialect.New(ctx, nil, dialect.Postgres); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("New(nil) = %v; want ErrInvalidOption", err)
	}
	db := &sql.DB{} // Never used: New refuses the kind first.
	if _, err := dialect.New(ctx, db, dialect.Kind("oracle")); !errors.Is(err, dblock.ErrInvalidOption) ||
		!strings.Contains(err.Error(), "oracle") {
		t.Errorf("New(kind oracle) = %v; want ErrInvalidOption naming the kind", err)
	}
	if _, err := dialect.New(ctx, db, dialect.SQLite); !errors.Is(err, dblock.ErrInvalidOption) ||
		!strings.Contains(err.Error(), "dialect/sqlite") {
		t.Errorf("New(sqlite) without its package = %v; want ErrInvalidOption naming the import", err)
	}
}

func TestOpenRefusesBadDSN(t *testing.T) {
	for _, dsn := range []string{"", "oracle://x", "just words"} {
		if _, err := dialect.Open(context.Background(), dsn); !errors.Is(err, dblock.ErrInvalidOption) {
			t.Errorf("Open(%q) = %v; want ErrInvalidOption", dsn, err)
		}
	}
}
