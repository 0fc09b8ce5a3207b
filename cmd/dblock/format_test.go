package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dblock-go/dblock"
)

func TestHuman(t *testing.T) {
	t.Parallel()
	cases := map[time.Duration]string{
		-time.Second:                          "0ms",
		850 * time.Millisecond:                "850ms",
		12*time.Second + 400*time.Millisecond: "12s",
		4*time.Minute + 12*time.Second:        "4m12s",
		3*time.Hour + 5*time.Minute:           "3h05m",
		52 * time.Hour:                        "2d04h",
	}
	for d, want := range cases {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("exec: %w: first\nsecond", dblock.ErrSchemaMissing)
	if got, want := oneLine(err.Error()), "dblock: exec: schema missing: first; second"; got != want {
		t.Errorf("oneLine = %q, want %q", got, want)
	}
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitFailure},
		{usageErrorf("bad"), exitUsage},
		{fmt.Errorf("x: %w", dblock.ErrInvalidOption), exitUsage},
		{fmt.Errorf("x: %w", dblock.ErrInvalidName), exitUsage},
		{fmt.Errorf("x: %w", dblock.ErrSchemaMissing), exitSchema},
		{fmt.Errorf("x: %w", dblock.ErrUnavailable), exitUnavailable},
		{&dblock.HeldError{Name: "n"}, exitNotAcquired},
		{&dblock.LostError{Name: "n", Reason: dblock.ErrExpired}, exitLost},
		{withCode(exitNotFound, errors.New("no such command")), exitNotFound},
	}
	for _, tc := range cases {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
