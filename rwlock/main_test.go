package rwlock_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/internal/sharedstress"
)

func TestMain(m *testing.M) {
	sharedstress.WorkerMain()
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}
