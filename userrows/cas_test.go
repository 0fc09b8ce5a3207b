package userrows_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/store"
	"github.com/dblock-go/dblock/userrows"
)

func TestCAS(t *testing.T) {
	t.Parallel()
	dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
		ctx := context.Background()
		db := iso.DB
		if _, err := db.SQL().ExecContext(ctx, `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, version BIGINT NOT NULL)`); err != nil {
			t.Fatalf("create table: %v", err)
		}
		if _, err := db.SQL().ExecContext(ctx, `INSERT INTO accounts (id, balance, version) VALUES (1, 100, 1)`); err != nil {
			t.Fatalf("insert: %v", err)
		}
		p := userrows.CASParams{Table: "accounts", KeyColumn: "id", VersionColumn: "version", Key: 1, Expected: 1,
			Set: map[string]any{"balance": 90}}
		v, err := userrows.CAS(ctx, db, nil, p)
		if err != nil || v != 2 {
			t.Fatalf("cas: %d %v, want version 2", v, err)
		}
		// Stale version: a conflict carrying what was expected and found.
		_, err = userrows.CAS(ctx, db, nil, p)
		var conflict *dblock.ConflictError
		if !errors.Is(err, dblock.ErrConflict) || !errors.As(err, &conflict) || conflict.Want != 1 || conflict.Found != 2 {
			t.Fatalf("stale cas: %v, want a conflict expecting 1 and finding 2", err)
		}
		// Missing row: found is -1.
		missing := p
		missing.Key = 42
		_, err = userrows.CAS(ctx, db, nil, missing)
		if !errors.As(err, &conflict) || conflict.Found != -1 {
			t.Fatalf("cas of a missing row: %v, want a conflict finding -1", err)
		}
		// Identifiers are validated, never interpolated as given.
		for _, bad := range []userrows.CASParams{
			{Table: "accounts; DROP TABLE accounts", KeyColumn: "id", VersionColumn: "version", Key: 1},
			{Table: "accounts", KeyColumn: `id" = 1 OR "1`, VersionColumn: "version", Key: 1},
			{Table: "accounts", KeyColumn: "id", VersionColumn: "version", Key: 1, Set: map[string]any{"balance = 0, x": 1}},
			{Table: "accounts", KeyColumn: "id", VersionColumn: "id", Key: 1},
			{Table: "accounts", KeyColumn: "id", VersionColumn: "version", Key: 1, Set: map[string]any{"version": 7}},
			{Table: "a.b.c", KeyColumn: "id", VersionColumn: "version", Key: 1},
		} {
			if _, err := userrows.CAS(ctx, db, nil, bad); !errors.Is(err, dblock.ErrInvalidOption) {
				t.Errorf("cas with %+v: %v, want ErrInvalidOption", bad, err)
			}
		}
		// Concurrent read-modify-write with retries: no update is lost.
		const writers = 8
		var wg sync.WaitGroup
		for i := 0; i < writers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := userrows.CASRetry(ctx, db, nil, 100, func(ctx context.Context) (userrows.CASParams, error) {
					var balance, version int64
					err := db.SQL().QueryRowContext(ctx, "SELECT balance, version FROM accounts WHERE id = "+store.Of(db).Dialect.Placeholder(1), 1).
						Scan(&balance, &version)
					return userrows.CASParams{Table: "accounts", KeyColumn: "id", VersionColumn: "version", Key: 1,
						Expected: version, Set: map[string]any{"balance": balance + 1}}, err
				})
				if err != nil {
					t.Errorf("cas retry: %v", err)
				}
			}()
		}
		wg.Wait()
		var balance, version int64
		if err := db.SQL().QueryRowContext(ctx, "SELECT balance, version FROM accounts WHERE id = 1").Scan(&balance, &version); err != nil {
			t.Fatalf("read: %v", err)
		}
		if balance != 90+writers || version != 2+writers {
			t.Fatalf("balance %d version %d, want %d and %d", balance, version, 90+writers, 2+writers)
		}
		// In the caller's transaction.
		tx, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		if _, err := userrows.CAS(ctx, db, tx, userrows.CASParams{Table: "accounts", KeyColumn: "id",
			VersionColumn: "version", Key: 1, Expected: version}); err != nil {
			t.Fatalf("cas in a transaction: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
		if iso.Kind == store.Postgres {
			// Schema-qualified names work too.
			var schema string
			if err := db.SQL().QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
				t.Fatalf("schema: %v", err)
			}
			if _, err := userrows.CAS(ctx, db, nil, userrows.CASParams{Table: schema + ".accounts", KeyColumn: "id",
				VersionColumn: "version", Key: 1, Expected: version + 1}); err != nil {
				t.Fatalf("cas on %s.accounts: %v", schema, err)
			}
		}
	})
}
