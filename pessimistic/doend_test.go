package pessimistic_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/pessimistic"
)

// TestDoOutlastsEndBound runs a Do whose fn takes twice the bound of the
// transaction's end: the bound starts when fn returns, so the commit is not
// cut short and fn's write is kept.
func TestDoOutlastsEndBound(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := testCtx(t)
		l := newLocker(t, iso.DB, nil)
		pessimistic.SetEndBound(l, bound)
		name := randName(t)
		table := "p_long_" + fmt.Sprint(time.Now().UnixNano()%1_000_000)
		if _, err := iso.Store().ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY)"); err != nil {
			t.Fatalf("create: %v", err)
		}
		err := l.Do(ctx, name, func(ctx context.Context, tx *sql.Tx) error {
			time.Sleep(2 * bound)
			_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id) VALUES (1)")
			return err
		})
		if err != nil {
			t.Fatalf("do with a fn longer than the end's bound: %v", err)
		}
		var n int
		if err := iso.Store().GetContext(ctx, &n, "SELECT count(*) FROM "+table); err != nil {
			t.Fatalf("read: %v", err)
		}
		if n != 1 {
			t.Fatalf("rows after the commit: %d, want 1", n)
		}
	})
}
