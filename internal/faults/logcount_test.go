package faults

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
)

// countHandler is a slog.Handler that counts the records (any level) whose
// message or attributes contain one of a set of substrings, and drops
// everything: how often a library retried after a given error.
type countHandler struct {
	match []string
	n     *atomic.Int64
	attrs []slog.Attr
}

func newCountLogger(match ...string) (*slog.Logger, *atomic.Int64) {
	n := new(atomic.Int64)
	return slog.New(&countHandler{match: match, n: n}), n
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	s := b.String()
	for _, m := range h.match {
		if strings.Contains(s, m) {
			h.n.Add(1)
			break
		}
	}
	return nil
}

func (h *countHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &countHandler{match: h.match, n: h.n, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *countHandler) WithGroup(string) slog.Handler { return h }
