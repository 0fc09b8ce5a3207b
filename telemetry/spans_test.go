package telemetry_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/dblock-go/dblock"
	"github.com/dblock-go/dblock/internal/dbtest"
	"github.com/dblock-go/dblock/internal/locktest"
	"github.com/dblock-go/dblock/optimistic"
	"github.com/dblock-go/dblock/pessimistic"
	"github.com/dblock-go/dblock/telemetry"
)

// TestDoSpans: Do is one span with the acquire and the release inside it,
// and fn's context carries it; the acquire span has the mode, the name and
// the token.
func TestDoSpans(t *testing.T) {
	for _, m := range modes {
		t.Run(m.mode, func(t *testing.T) {
			t.Parallel()
			dbtest.ForEach(t, func(t *testing.T, iso *dbtest.Isolated) {
				ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
				defer cancel()
				r := newRig(telemetry.NamesRaw)
				l := m.open(t, iso, r.cfg)
				defer l.Close()
				name := locktest.RandomName("otel-do")
				var token dblock.Token
				must(t, l.Do(ctx, name, func(context.Context) error { return nil }, dblock.WithToken()))
				do := one(t, r, "dblock.do")
				acq, rel := one(t, r, "dblock.acquire"), one(t, r, "dblock.release")
				for _, child := range [...]string{"acquire", "release"} {
					s := acq
					if child == "release" {
						s = rel
					}
					if s.Parent().SpanID() != do.SpanContext().SpanID() {
						t.Errorf("the %s span is not a child of the Do span", child)
					}
				}
				if v, ok := attr(acq, telemetry.AttrName); !ok || v.AsString() != name {
					t.Errorf("acquire span name attribute %v %v, want %q", v.AsString(), ok, name)
				}
				if v, ok := attr(acq, telemetry.AttrMode); !ok || v.AsString() != m.attr() {
					t.Errorf("acquire span mode %q, want %q", v.AsString(), m.attr())
				}
				v, ok := attr(acq, telemetry.AttrToken)
				if token = dblock.Token(v.AsInt64()); !ok || token <= 0 {
					t.Errorf("acquire span token %d (%v), want a positive token", token, ok)
				}
				if v, _ := attr(do, telemetry.AttrToken); dblock.Token(v.AsInt64()) != token {
					t.Errorf("Do span token %d, want the acquisition's %d", v.AsInt64(), token)
				}
			})
		})
	}
}

// one returns the one ended span named name.
func one(t *testing.T, r *rig, name string) spanView {
	t.Helper()
	s := r.ended(name)
	if len(s) != 1 {
		t.Fatalf("%d %s spans, want 1", len(s), name)
	}
	return s[0]
}

// TestNamePolicy: hashed names are the first 16 hex digits of their
// SHA-256; dropped names are absent; an unknown policy is refused.
func TestNamePolicy(t *testing.T) {
	iso := dbtest.New(t, dbtest.Kinds[len(dbtest.Kinds)-1])
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	name := locktest.RandomName("customer-42")
	sum := sha256.Sum256([]byte(name))
	for policy, want := range map[telemetry.NamePolicy]string{
		telemetry.NamesHashed: hex.EncodeToString(sum[:8]), telemetry.NamesDropped: "",
	} {
		r := newRig(policy)
		l, err := optimistic.New(iso.DB, &optimistic.Config{Telemetry: r.cfg})
		must(t, err)
		lease, err := l.Acquire(ctx, name)
		must(t, err)
		must(t, lease.Release(ctx))
		must(t, l.Close())
		v, ok := attr(one(t, r, "dblock.acquire"), telemetry.AttrName)
		if want == "" && ok || want != "" && v.AsString() != want {
			t.Errorf("policy %d: name attribute %q (present %v), want %q", policy, v.AsString(), ok, want)
		}
	}
	bad := &telemetry.Config{Names: telemetry.NamesDropped + 1}
	if _, err := optimistic.New(iso.DB, &optimistic.Config{Telemetry: bad}); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("optimistic.New with an unknown name policy: %v, want ErrInvalidOption", err)
	}
	if _, err := pessimistic.New(iso.DB, &pessimistic.Config{Telemetry: bad}); !errors.Is(err, dblock.ErrInvalidOption) {
		t.Errorf("pessimistic.New with an unknown name policy: %v, want ErrInvalidOption", err)
	}
}
