package pessimistic_test

import (
	"context"
	"testing"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestGiveConnOnce: a hold's connection given back twice at once (a lost
// hold's teardown destroying it while its caller's release returns it)
// goes back once: database/sql's Conn.Raw panics on a Conn that another
// goroutine closes under it, which the fault suite met as a nil pointer
// dereference in closeConn.
func TestGiveConnOnce(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		db := store.Of(iso.DB)
		ctx := context.Background()
		for range 300 {
			conn, err := db.Connx(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := conn.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			pessimistic.GiveConnTwice(conn)
		}
		if st := db.Stats(); st.InUse != 0 {
			t.Fatalf("%d connections still in use after every hold gave its back", st.InUse)
		}
	})
}
