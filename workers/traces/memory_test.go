package traces_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/workers/traces"
)

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// The store's memory stays what max_bytes says when spans carry long
// group attributes: the store keeps each value apart from the span's
// encoding (to group by it), and counts both. Not parallel: it measures
// the heap.
func TestStoreMemoryWithLongGroupValues(t *testing.T) {
	const maxBytes = 8 << 20
	s := newStore(t, traces.WithMaxBytes(maxBytes))
	before := liveHeap()
	long := func(i int, c string) string { return fmt.Sprint(i, strings.Repeat(c, 20<<10)) }
	for i := range 2000 {
		s.Add(span(i, i, -1, int64(i), int64(i)+1,
			engine.AttrSessionID, long(i, "s"), engine.AttrMessageID, long(i, "m"), engine.AttrFunctionID, long(i, "f")))
	}
	used := int64(liveHeap()) - int64(before)
	st := s.Stats()
	runtime.KeepAlive(s)
	t.Logf("%d KiB of heap, %d KiB counted, %d spans", used>>10, st.Bytes>>10, st.Spans)
	if st.Bytes > maxBytes || used > maxBytes*5/4 {
		t.Fatalf("%d MiB of heap for a store of %d MiB (it counts %d MiB, %d spans)", used>>20, maxBytes>>20, st.Bytes>>20, st.Spans)
	}
}
