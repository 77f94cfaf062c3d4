package traces

import "time"

// HeldByEvicted counts the spans the store still references from traces
// it evicted.
func HeldByEvicted(s *Store) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, t := range s.order[s.head:] {
		if t.evicted {
			n += len(t.spans)
		}
	}
	return n
}

// JSONDepth is jsonDepth: the deepest nesting of arrays and objects in
// valid JSON data.
var JSONDepth = jsonDepth

// WithStreamCheck sets how often a store opened with [Open] checks that
// its stream is the one it follows (default 30 s).
func WithStreamCheck(d time.Duration) Option {
	return func(o *options) error {
		o.checkEvery = d
		return nil
	}
}
