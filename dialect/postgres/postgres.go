package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/store"
)

func init() {
	store.Register(&store.Driver{
		Kind:             store.Postgres,
		Name:             "pgx",
		Open:             open,
		ServerError:      serverError,
		ConnLost:         connLost,
		NotSent:          notSent,
		CommitRolledBack: func(err error) bool { return errors.Is(err, pgx.ErrTxCommitRollback) },
		Listen:           listen,
		Wait:             wait,
		Native:           native,
		DeferredBegin:    true,
	})
}

// FromPool returns a dblock handle over pool, which the caller keeps: Close
// releases dblock's own *sql.DB over it, not the pool. dblock takes its
// connections from the pool, so size the pool for the application's
// statements and the locks' together (a pessimistic hold keeps a
// connection, and on PostgreSQL a waiting lease acquirer may keep one for
// LISTEN). What dialect.Open sets on its own pools (server-side TCP
// keepalives, see dialect.New) is the pool config's to set.
func FromPool(ctx context.Context, pool *pgxpool.Pool) (*dialect.DB, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil *pgxpool.Pool", dblock.ErrInvalidOption)
	}
	// stdlib.OpenDBFromPool's pool, with a pessimistic hold's BEGIN
	// deferred to its lock statement as on the pools open opens.
	sdb := sql.OpenDB(lazyConnector{stdlib.GetPoolConnector(pool)})
	sdb.SetMaxIdleConns(0)
	s, err := store.New(ctx, sdb, store.Postgres)
	if err != nil {
		_ = sdb.Close()
		return nil, err
	}
	s.CloseWith(sdb.Close)
	s.DeferBegins()
	return store.Front(s).(*dialect.DB), nil
}

// open opens a pgx-backed *sql.DB. Unless the DSN says otherwise, the
// server is asked to probe the client's TCP connection (keepalives every few
// seconds), so the session of a vanished client, and any lock it held, ends
// within about 30 s instead of hours.
func open(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres DSN %s: %w", dblock.ErrInvalidOption, store.Redact(dsn), err)
	}
	defaults := map[string]string{
		"application_name":        "dblock",
		"tcp_keepalives_idle":     "10",
		"tcp_keepalives_interval": "5",
		"tcp_keepalives_count":    "3",
	}
	for k, v := range defaults {
		if _, ok := cfg.RuntimeParams[k]; !ok {
			cfg.RuntimeParams[k] = v
		}
	}
	db := sql.OpenDB(lazyConnector{stdlib.GetConnector(*cfg)})
	db.SetMaxIdleConns(32)
	return db, nil
}

func serverError(err error) (store.ServerError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return store.ServerError{}, false
	}
	return store.ServerError{State: pgErr.Code, Message: pgErr.Message}, true
}

// connLost: the connection could not be made, or pgx closed it.
func connLost(err error) bool { return notSent(err) || errors.Is(err, pgconn.ErrConnClosed) }

// notSent: the connection could not be made (refused, failed start-up).
func notSent(err error) bool {
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}

// listen runs LISTEN channel on conn, which must be pgx's.
func listen(ctx context.Context, conn *sql.Conn, channel string) error {
	return conn.Raw(func(dc any) error {
		sc, err := stdlibConn(dc)
		if err != nil {
			return fmt.Errorf("%w: LISTEN needs the pgx driver, have %T", dblock.ErrInvalidOption, dc)
		}
		_, err = sc.Conn().Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
		return err
	})
}

// wait returns the payload of the next notification on conn.
func wait(ctx context.Context, conn *sql.Conn) (string, error) {
	var payload string
	err := conn.Raw(func(dc any) error {
		sc, err := stdlibConn(dc)
		if err != nil {
			return err
		}
		n, err := sc.Conn().WaitForNotification(ctx)
		if err != nil {
			return err
		}
		payload = n.Payload
		return nil
	})
	return payload, err
}
