package errjoin

import (
	"errors"
	"io"
	"os"
	"testing"
)

func TestJoin(t *testing.T) {
	if Join() != nil || Join(nil, nil) != nil {
		t.Fatal("Join of nothing is not nil")
	}
	err := Join(io.EOF, nil, errors.Join(os.ErrClosed, os.ErrExist))
	if !errors.Is(err, io.EOF) || !errors.Is(err, os.ErrClosed) || !errors.Is(err, os.ErrExist) {
		t.Fatalf("Join hides an error: %v", err)
	}
	if got, want := err.Error(), "EOF; file already closed; file already exists"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}
