// Package shapes is a fixture for the API dump's line formats.
package shapes

import (
	"context"
	"errors"
)

// Answer is a constant.
const Answer = 42

const hidden = 1

// ErrX is a sentinel.
var ErrX = errors.New("shapes: x")

// Thing is a struct.
type Thing struct {
	Name   string
	hidden int
}

// Option configures a Thing.
type Option func(*Thing)

// Getter is an interface.
type Getter interface {
	Get(key string) (int, bool)
}

// New makes a Thing.
func New(ctx context.Context, name string, opts ...Option) (*Thing, error) {
	_ = ctx
	return &Thing{Name: name, hidden: hidden}, nil
}

// Close closes it.
func (t *Thing) Close() error { return nil }

func (t *Thing) hiddenMethod() {}
