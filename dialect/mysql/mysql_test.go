package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestOpen opens the test server through this package's driver and refuses
// a malformed DSN without echoing its password.
func TestOpen(t *testing.T) {
	iso := dbtest.New(t, store.MySQL)
	if iso.DB.Kind() != dialect.MySQL {
		t.Errorf("Kind = %q, want mysql", iso.DB.Kind())
	}
	_, err := dialect.Open(context.Background(), "mysql://u:secret@tcp(127.0.0.1:3306")
	if !errors.Is(err, dblock.ErrInvalidOption) || strings.Contains(err.Error(), "secret") {
		t.Errorf("malformed DSN: %v; want ErrInvalidOption without the password", err)
	}
}
