package mode

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dblock-go/dblock"
)

// Call is an acquisition's checked input, the result of Begin.
type Call struct {
	// Names are the call's names, sorted and without duplicates.
	Names []string
	// Label names them in errors and logs (comma-joined).
	Label string
	// Opts are the resolved options.
	Opts Options
	// Wait reports whether the call waits: false for a try, and for a
	// wait bounded to zero (WithWait(0)).
	Wait bool
}

// Begin is the prologue every acquisition shares: each name is validated,
// the options resolved, and a zero wait makes the call a try. what names
// the call in its errors ("optimistic: acquire").
func Begin(ctx context.Context, what string, names []string, wait bool, opts []dblock.Option) (Call, error) {
	if len(names) == 0 {
		return Call{}, fmt.Errorf("%s: %w: no names", what, dblock.ErrInvalidName)
	}
	for _, n := range names {
		if err := dblock.ValidateName(n); err != nil {
			return Call{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	c := Call{Names: slices.Compact(sorted), Wait: wait}
	c.Label = strings.Join(c.Names, ",")
	o, err := Resolve(ctx, opts)
	if err != nil {
		return Call{}, fmt.Errorf("%s %q: %w", what, c.Label, err)
	}
	c.Opts = o
	if o.HasWait && o.Wait == 0 {
		c.Wait = false
	}
	return c, nil
}

// BeginOne is Begin for one name, without the allocations of a list: the
// Call's Names is nil and its Label is name.
func BeginOne(ctx context.Context, what, name string, wait bool, opts []dblock.Option) (Call, error) {
	if err := dblock.ValidateName(name); err != nil {
		return Call{}, fmt.Errorf("%s: %w", what, err)
	}
	o, err := Resolve(ctx, opts)
	if err != nil {
		return Call{}, fmt.Errorf("%s %q: %w", what, name, err)
	}
	c := Call{Label: name, Opts: o, Wait: wait}
	if o.HasWait && o.Wait == 0 {
		c.Wait = false
	}
	return c, nil
}

// WaitContext returns ctx bounded by the call's WithWait when the call
// waits with a bound, and ctx itself otherwise; call cancel when done.
func (c Call) WaitContext(ctx context.Context) (waitCtx context.Context, cancel context.CancelFunc) {
	if c.Wait && c.Opts.HasWait {
		return context.WithTimeout(ctx, c.Opts.Wait)
	}
	return ctx, func() {}
}
