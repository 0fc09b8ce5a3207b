package rwlock_test

import (
	"testing"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/rwlock"
)

// The shared-lock properties, with and without the fair option, on every
// database.
func TestConformance(t *testing.T) {
	t.Parallel()
	locktest.RunRW(t, func(t *testing.T, db *dialect.DB, fair bool) locktest.RW {
		l, err := rwlock.New(db, &rwlock.Config{Fair: fair})
		if err != nil {
			t.Fatalf("new: %v", err)
		}
		return l
	})
}
