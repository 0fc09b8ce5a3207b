package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"modernc.org/sqlite"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

func init() {
	store.Register(&store.Driver{
		Kind:        store.SQLite,
		Name:        "sqlite",
		Open:        open,
		ServerError: serverError,
		ConnLost:    func(error) bool { return false }, // An embedded database has no connection to lose.
	})
}

// open opens a modernc.org/sqlite *sql.DB on path (which may carry ?query
// parameters). Unless given: WAL journal, synchronous=FULL (an acquired lock
// survives power loss), a 5 s busy timeout, and BEGIN IMMEDIATE for
// transactions so two writers never deadlock on lock upgrade.
func open(path string) (*sql.DB, error) {
	file, rawQuery, _ := strings.Cut(path, "?")
	if file == "" {
		return nil, fmt.Errorf("%w: sqlite DSN has no file path", dblock.ErrInvalidOption)
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: sqlite DSN query %q: %w", dblock.ErrInvalidOption, rawQuery, err)
	}
	pragmas := strings.Join(q["_pragma"], ",")
	for _, p := range []struct{ name, value string }{
		{"busy_timeout", "busy_timeout(5000)"},
		{"journal_mode", "journal_mode(WAL)"},
		{"synchronous", "synchronous(FULL)"},
	} {
		if !strings.Contains(pragmas, p.name) {
			q.Add("_pragma", p.value)
		}
	}
	if q.Get("_txlock") == "" {
		q.Set("_txlock", "immediate")
	}
	db, err := sql.Open("sqlite", "file:"+file+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("%w: sqlite DSN: %w", dblock.ErrInvalidOption, err)
	}
	db.SetMaxIdleConns(8)
	return db, nil
}

// serverError reads the extended result code of a SQLite error.
func serverError(err error) (store.ServerError, bool) {
	var sqErr *sqlite.Error
	if !errors.As(err, &sqErr) {
		return store.ServerError{}, false
	}
	return store.ServerError{Code: sqErr.Code(), Message: sqErr.Error()}, true
}
