package mysql

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/store"
)

func init() {
	store.Register(&store.Driver{
		Kind:        store.MySQL,
		Name:        "mysql",
		Open:        open,
		ServerError: serverError,
		ConnLost:    func(err error) bool { return errors.Is(err, mysql.ErrInvalidConn) },
		// The pools open opens send a checked commit where asked, and
		// MariaDB's holds begin with their lock statement (lazybegin.go).
		CheckedCommit: true,
		DeferredBegin: true,
		// Their connections restore a caller's context from
		// store.Unwatched (checked.go) and carry it on the socket where
		// they can (deadline.go).
		Unwatched: true,
		SetLog: func(w io.Writer) {
			_ = mysql.SetLogger(log.New(w, "[mysql] ", log.Ldate|log.Ltime|log.Lshortfile))
		},
	})
}

// open opens a go-sql-driver *sql.DB from the part of a mysql:// DSN after
// the scheme, setting what dblock needs: parseTime in UTC, affected rows
// counted as changed rows (clientFoundRows off), and a session lock-wait
// bound of 1 s for MySQL 8, whose statements cannot carry their own
// (MariaDB's do).
func open(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: mysql DSN %s: %w (want mysql://user:pass@tcp(host:port)/db)",
			dblock.ErrInvalidOption, store.Redact("mysql://"+dsn), err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.ClientFoundRows = false
	cfg.MultiStatements = false
	if !strings.Contains(dsn, "interpolateParams=") {
		// One round trip per statement: without it the driver prepares,
		// executes and closes a server-side statement for every call with
		// arguments. (The driver refuses to interpolate for the few
		// multibyte character sets where it would be unsafe.)
		cfg.InterpolateParams = true
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.DialFunc == nil && (cfg.Net == "tcp" || cfg.Net == "tcp4" || cfg.Net == "tcp6" || cfg.Net == "unix") {
		// The driver's own dial, recorded: a pessimistic hold's commit can
		// then be ended at its bound by closing the socket.
		cfg.DialFunc = dialRecorded
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, ok := cfg.Params["innodb_lock_wait_timeout"]; !ok {
		cfg.Params["innodb_lock_wait_timeout"] = "1"
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: mysql DSN: %w", dblock.ErrInvalidOption, err)
	}
	db := sql.OpenDB(checkedConnector{Connector: conn, interpolate: cfg.InterpolateParams,
		ownDeadlines: cfg.ReadTimeout == 0 && cfg.WriteTimeout == 0})
	db.SetMaxIdleConns(32)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

func serverError(err error) (store.ServerError, bool) {
	var myErr *mysql.MySQLError
	if !errors.As(err, &myErr) {
		return store.ServerError{}, false
	}
	return store.ServerError{State: string(myErr.SQLState[:]), Code: int(myErr.Number), Message: myErr.Message}, true
}
