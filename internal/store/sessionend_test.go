package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestAwaitSessionEnd (PostgreSQL, MariaDB): SessionFromPort knows a live
// session by its client's port (and no other port); AwaitSessionEnd waits
// out a live session until its context ends, and returns once a killed one
// is no longer listed; a session already gone returns at once.
func TestAwaitSessionEnd(t *testing.T) {
	t.Parallel()
	for _, kind := range []store.Kind{store.Postgres, store.MySQL} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			iso := dbtest.New(t, kind)
			db := iso.Store()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			conn, err := db.Connx(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			id, err := db.SessionID(ctx, conn)
			if err != nil {
				t.Fatal(err)
			}

			port := clientPort(t, ctx, iso.Kind, conn)
			for _, c := range []struct {
				port int
				want bool
			}{{port, true}, {port + 1, false}} {
				got, err := db.SessionFromPort(ctx, nil, id, c.port)
				if err != nil || got != c.want {
					t.Fatalf("SessionFromPort(%d, %d) (the session's port is %d): %v, %v; want %v", id, c.port, port, got, err, c.want)
				}
			}

			short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
			err = db.AwaitSessionEnd(short, nil, id)
			cancelShort()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("await a live session: %v, want context.DeadlineExceeded", err)
			}

			if err := db.KillSession(ctx, nil, id); err != nil {
				t.Fatal(err)
			}
			if err := db.AwaitSessionEnd(ctx, nil, id); err != nil {
				t.Fatalf("await a killed session: %v", err)
			}
			alive, err := db.SessionsAlive(ctx, nil, []store.SessionRef{{ID: id}})
			if err != nil {
				t.Fatal(err)
			}
			if alive[0] {
				t.Fatal("the killed session is still listed after AwaitSessionEnd returned")
			}
			if err := db.AwaitSessionEnd(ctx, nil, id); err != nil {
				t.Fatalf("await a session gone: %v", err)
			}
		})
	}
}

// clientPort is the TCP port conn's session connected from, as the server
// lists it.
func clientPort(t *testing.T, ctx context.Context, kind store.Kind, conn *sqlx.Conn) int {
	t.Helper()
	if kind == store.Postgres {
		var port int
		if err := conn.QueryRowxContext(ctx, "SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&port); err != nil {
			t.Fatal(err)
		}
		return port
	}
	var host string
	if err := conn.QueryRowxContext(ctx, "SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()").Scan(&host); err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(host[strings.LastIndexByte(host, ':')+1:])
	if err != nil {
		t.Fatalf("processlist host %q: %v", host, err)
	}
	return port
}
