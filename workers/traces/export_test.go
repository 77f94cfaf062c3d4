package traces

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
