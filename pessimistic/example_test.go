package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/exampledb"
	"github.com/dblock-go/dblock/pessimistic"
)

// The critical section runs in the locking transaction: its writes commit
// with the lock, or roll back with it when fn fails.
func ExampleLocker_Do() {
	db, cleanup := exampledb.Open("locks.db",
		"CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)",
		"INSERT INTO accounts (id, balance) VALUES (42, 100)")
	defer cleanup()
	locker, err := pessimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	err = locker.Do(ctx, "account:42", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - 30 WHERE id = 42")
		return err
	})
	fmt.Println("debit:", err)

	overdraft := errors.New("insufficient funds")
	err = locker.Do(ctx, "account:42", func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - 500 WHERE id = 42"); err != nil {
			return err
		}
		return overdraft // Rolled back.
	})
	fmt.Println("second debit:", err)

	var balance int
	_ = db.SQL().QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = 42").Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// debit: <nil>
	// second debit: insufficient funds
	// balance: 70
}

// The handle form: the caller uses the transaction, asks for a fencing
// token, and commits.
func ExampleLocker_Acquire() {
	db, cleanup := exampledb.Open("locks.db",
		"CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)",
		"INSERT INTO accounts (id, balance) VALUES (42, 100)")
	defer cleanup()
	locker, err := pessimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.Acquire(ctx, "account:42", dblock.WithToken())
	if err != nil {
		panic(err)
	}
	fmt.Println("token issued:", lease.Token() > 0)
	if _, err := lease.Tx().ExecContext(ctx, "UPDATE accounts SET balance = 0 WHERE id = 42"); err != nil {
		_ = lease.Rollback(ctx)
		panic(err)
	}
	fmt.Println("commit:", lease.Commit(ctx))
	// Output:
	// token issued: true
	// commit: <nil>
}

// TryAcquire returns at once when the name is held.
func ExampleLocker_TryAcquire() {
	db, cleanup := exampledb.Open("locks.db",
		"CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)",
		"INSERT INTO accounts (id, balance) VALUES (42, 100)")
	defer cleanup()
	locker, err := pessimistic.New(db, nil)
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	held, err := locker.Acquire(ctx, "migrations")
	if err != nil {
		panic(err)
	}
	_, err = locker.TryAcquire(ctx, "migrations")
	fmt.Println("not acquired:", errors.Is(err, dblock.ErrNotAcquired))
	_ = held.Release(ctx)
	// Output:
	// not acquired: true
}
