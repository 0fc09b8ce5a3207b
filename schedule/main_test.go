package schedule_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dblock-go/dblock/internal/locktest"
)

func TestMain(m *testing.M) {
	workerMain()
	goleak.VerifyTestMain(m, locktest.LeakOptions()...)
}
