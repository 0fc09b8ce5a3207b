package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
)

// TestAwaitSessionEnd (PostgreSQL, MariaDB): AwaitSessionEnd waits out a
// live session until its context ends, and returns once a killed one is
// no longer listed; a session already gone returns at once.
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
