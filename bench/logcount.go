package bench

import (
	"context"
	"log/slog"
	"maps"
	"sync"
)

// warnCounter is a slog.Handler that counts the warnings and errors the
// stack logs, by message ("session grain halted" …), and passes every
// record on to next (if any).
type warnCounter struct {
	next   slog.Handler
	counts *counts
}

type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func newWarnCounter(next slog.Handler) *warnCounter {
	return &warnCounter{next: next, counts: &counts{m: map[string]int{}}}
}

func (h *warnCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || (h.next != nil && h.next.Enabled(ctx, l))
}

func (h *warnCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.counts.mu.Lock()
		h.counts.m[r.Message]++
		h.counts.mu.Unlock()
	}
	if h.next != nil && h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *warnCounter) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	if h.next != nil {
		c.next = h.next.WithAttrs(as)
	}
	return &c
}

func (h *warnCounter) WithGroup(name string) slog.Handler {
	c := *h
	if h.next != nil {
		c.next = h.next.WithGroup(name)
	}
	return &c
}

// snapshot returns the counts so far.
func (h *warnCounter) snapshot() map[string]int {
	h.counts.mu.Lock()
	defer h.counts.mu.Unlock()
	return maps.Clone(h.counts.m)
}

// since returns the counts that grew from before, by message.
func since(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
