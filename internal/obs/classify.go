package obs

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/telemetry"
)

// outcome names how an acquire call ended (telemetry.AttrOutcome).
func outcome(err error) string {
	switch {
	case err == nil:
		return telemetry.OutcomeAcquired
	case errors.Is(err, dblock.ErrClosed):
		return telemetry.OutcomeClosed
	case errors.Is(err, dblock.ErrInvalidName), errors.Is(err, dblock.ErrInvalidOption):
		return telemetry.OutcomeInvalid
	case errors.Is(err, context.Canceled):
		return telemetry.OutcomeCanceled
	case errors.Is(err, dblock.ErrNotAcquired):
		return telemetry.OutcomeBusy
	case errors.Is(err, dblock.ErrUnavailable):
		return telemetry.OutcomeUnavailable
	default:
		return telemetry.OutcomeError
	}
}

// reason names why a lease was lost (telemetry.AttrReason).
func reason(err error) string {
	switch {
	case errors.Is(err, dblock.ErrClosed):
		return telemetry.ReasonClosed
	case errors.Is(err, dblock.ErrForceReleased):
		return telemetry.ReasonForceReleased
	case errors.Is(err, dblock.ErrTakenOver):
		return telemetry.ReasonTakenOver
	case errors.Is(err, dblock.ErrConnLost):
		return telemetry.ReasonConnectionLost
	case errors.Is(err, dblock.ErrDeadlock):
		return telemetry.ReasonDeadlock
	case errors.Is(err, dblock.ErrExpired):
		return telemetry.ReasonExpired
	default:
		return telemetry.ReasonOther
	}
}

// modulePath is the module whose version names the instrumentation scope.
const modulePath = "github.com/dblock-go/dblock"

// version is the module's version as the build recorded it: the dependency's
// version in an application, the main module's in dblock's own builds
// ("(devel)" from a work tree).
var version = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if bi.Main.Path == modulePath {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			return d.Version
		}
	}
	return "unknown"
})
