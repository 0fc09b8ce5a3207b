package semaphore_test

import (
	"testing"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/semaphore"
)

// The semaphore properties, with and without the fair option, on every
// database.
func TestConformance(t *testing.T) {
	t.Parallel()
	locktest.RunSemaphore(t, func(t *testing.T, db *dialect.DB, fair bool) locktest.Semaphore {
		l, err := semaphore.New(db, &semaphore.Config{Fair: fair})
		if err != nil {
			t.Fatalf("new: %v", err)
		}
		return l
	})
}
