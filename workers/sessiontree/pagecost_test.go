package sessiontree

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// pagedReads reads every page of session::entries, session::messages and
// session::export_html of the active path of sid over the bus, and
// returns, per function, the pages and the entries the store read.
func pagedReads(t testing.TB, s *Store, e *engine.Engine, sid string) map[string][2]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := map[string][2]int64{}
	count := func(name string, read func() (bool, error)) {
		before := s.fetched.Load()
		pages := int64(0)
		for more := true; more; pages++ {
			var err error
			if more, err = read(); err != nil {
				t.Fatalf("%s page %d: %v", name, pages+1, err)
			}
			if pages > 10_000 {
				t.Fatalf("%s: no end", name)
			}
		}
		out[name] = [2]int64{pages, s.fetched.Load() - before}
	}
	var leaf, after string
	count("entries", func() (bool, error) {
		r, err := engine.Call[EntriesResponse](ctx, e, EntriesFunction, EntriesRequest{SessionID: sid, Leaf: leaf, After: after})
		if err != nil || !r.Truncated {
			return false, err
		}
		leaf, after = r.Leaf, r.Entries[len(r.Entries)-1].ID
		return true, nil
	})
	leaf, after = "", ""
	count("messages", func() (bool, error) {
		r, err := engine.Call[MessagesResponse](ctx, e, MessagesFunction, MessagesRequest{SessionID: sid, Leaf: leaf, After: after})
		if err != nil || !r.Truncated {
			return false, err
		}
		leaf, after = r.Leaf, r.Messages[len(r.Messages)-1].EntryID
		return true, nil
	})
	leaf, after = "", ""
	count("export_html", func() (bool, error) {
		r, err := engine.Call[ExportHTMLResponse](ctx, e, ExportHTMLFunction, ExportHTMLRequest{SessionID: sid, Leaf: leaf, After: after})
		if err != nil || !r.Truncated {
			return false, err
		}
		leaf, after = r.Leaf, r.LastEntryID
		return true, nil
	})
	return out
}

// seedPath creates session sid with a path of n messages.
func seedPath(t testing.TB, s *Store, sid string, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Create(ctx, CreateRequest{SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += MaxBatchEntries {
		if _, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: sid, Messages: batchOf(fmt.Sprintf("%s: some text of a typical length for a chat turn, message %d.", sid, i), min(MaxBatchEntries, n-i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPagedReadsAreLinear: reading every page of a long path (entries,
// messages, export) reads each entry of the path about once, not once
// per page: a path four times longer costs about four times the reads.
// Before, every page read the whole path again (P pages of N entries
// cost P × N reads).
func TestPagedReadsAreLinear(t *testing.T) {
	t.Parallel()
	w, e := startSmallPayload(t, 64<<10, wire.JSON, false)
	s := w.Store()
	for _, n := range []int{2_000, 8_000} {
		sid := fmt.Sprintf("path%d", n)
		seedPath(t, s, sid, n)
		for name, c := range pagedReads(t, s, e, sid) {
			t.Logf("path=%d %s: %d pages, %d entry reads", n, name, c[0], c[1])
			// The first page reads the path; each other page reads the
			// newest message of the subject and the leaf.
			if limit := int64(n) + 4*c[0] + 16; c[0] < 3 || c[1] > limit {
				t.Errorf("path=%d %s: %d entry reads in %d pages, want at most %d", n, name, c[1], c[0], limit)
			}
		}
	}
}

// BenchmarkPagedReads reads every page of entries, messages and export
// of a path at a 64 KiB max payload, reporting the entry reads of each.
func BenchmarkPagedReads(b *testing.B) {
	for _, n := range []int{2_000, 8_000} {
		b.Run(fmt.Sprintf("path=%d", n), func(b *testing.B) {
			w, e := startSmallPayload(b, 64<<10, wire.JSON, false)
			s := w.Store()
			seedPath(b, s, "s", n)
			var reads, pages int64
			b.ResetTimer()
			for b.Loop() {
				reads, pages = 0, 0
				for _, c := range pagedReads(b, s, e, "s") {
					pages += c[0]
					reads += c[1]
				}
			}
			b.ReportMetric(float64(reads), "reads/op")
			b.ReportMetric(float64(pages), "pages/op")
		})
	}
}

// treePages reads every page of session::tree of sid over the bus, and
// returns the pages, the entries the store read and the bytes the
// process allocated meanwhile (the embedded server's included).
func treePages(t testing.TB, s *Store, e *engine.Engine, sid string) (pages, reads int64, alloc uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	bytes, before := ms.TotalAlloc, s.fetched.Load()
	req := TreeRequest{SessionID: sid}
	for ; ; pages++ {
		r, err := engine.Call[TreeResponse](ctx, e, TreeFunction, req)
		if err != nil {
			t.Fatalf("tree page %d: %v", pages+1, err)
		}
		if !r.Truncated {
			pages++
			break
		}
		if pages > 10_000 {
			t.Fatal("tree: no end")
		}
		req.After = r.Nodes[len(r.Nodes)-1].EntryID
	}
	runtime.ReadMemStats(&ms)
	return pages, s.fetched.Load() - before, ms.TotalAlloc - bytes
}

// TestTreePagesAreLinear: reading every page of session::tree reads
// each entry of the session about once, and allocates about what one
// read of it does, not once per page: a session four times longer costs
// about four times the reads and the bytes. Before, every page read the
// whole session again (P pages of N entries cost P × N reads, and
// allocated P times the session's records).
func TestTreePagesAreLinear(t *testing.T) {
	t.Parallel()
	w, e := startSmallPayload(t, 64<<10, wire.JSON, false)
	s := w.Store()
	var perEntry []float64
	for _, n := range []int{2_000, 8_000} {
		sid := fmt.Sprintf("tree%d", n)
		seedPath(t, s, sid, n)
		pages, reads, alloc := treePages(t, s, e, sid)
		t.Logf("session=%d tree: %d pages, %d entry reads, %d KiB allocated", n, pages, reads, alloc>>10)
		// The first page reads the session; each other page reads the
		// newest message of the subject.
		if limit := int64(n) + 4*pages + 16; pages < 3 || reads > limit {
			t.Errorf("session=%d: %d entry reads in %d pages, want at most %d", n, reads, pages, limit)
		}
		perEntry = append(perEntry, float64(alloc)/float64(n))
	}
	// Bytes per entry stay about flat when the session (and the number
	// of pages) grows fourfold; read once per page they grow fourfold.
	if perEntry[1] > 2*perEntry[0] {
		t.Errorf("allocated %.0f bytes an entry at 8,000 entries, %.0f at 2,000: grows with the pages", perEntry[1], perEntry[0])
	}
}

// BenchmarkTreePages reads every page of session::tree of a session at a
// 64 KiB max payload, reporting its entry reads and pages.
func BenchmarkTreePages(b *testing.B) {
	for _, n := range []int{2_000, 8_000} {
		b.Run(fmt.Sprintf("session=%d", n), func(b *testing.B) {
			w, e := startSmallPayload(b, 64<<10, wire.JSON, false)
			s := w.Store()
			seedPath(b, s, "s", n)
			var reads, pages int64
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				pages, reads, _ = treePages(b, s, e, "s")
			}
			b.ReportMetric(float64(reads), "reads/op")
			b.ReportMetric(float64(pages), "pages/op")
		})
	}
}

// TestTreeHoldsSummaries: the tree of a session of large entries is read
// without holding the entries: the heap grows by about one batch read
// (8 MiB, in the client and in the embedded server) at most, not by the
// session (64 MiB of 250 KiB texts). Before, every record of the session
// was held until the summaries were made (the heap grew by some 90 MiB).
// Not parallel: it samples the whole process's heap with a low GC
// target.
func TestTreeHoldsSummaries(t *testing.T) {
	if raceEnabled {
		t.Skip("measures the heap, which the race detector changes and slows past the test's budget: `go tool task test` runs it again without -race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, _ := startSmallPayload(t, 1<<20, wire.JSON, false)
	s := f.Store()
	const n, size = 256, 250 << 10
	if _, err := s.Create(ctx, CreateRequest{SessionID: "big"}); err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("a large entry ", size/14)
	for i := range n {
		appendText(t, s, "big", "", fmt.Sprintf("%d %s", i, text))
	}
	// Once, so that what the first read sets up once (the server's
	// caches, the connection's buffers) is in the baseline.
	if _, err := s.Tree(ctx, SessionRequest{SessionID: "big"}); err != nil {
		t.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	done := make(chan error, 1)
	go func() {
		tr, err := s.Tree(ctx, SessionRequest{SessionID: "big"})
		if err == nil && len(tr.Nodes) != n {
			err = fmt.Errorf("%d nodes, want %d", len(tr.Nodes), n)
		}
		done <- err
	}()
	peak := uint64(0)
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		case <-time.After(time.Millisecond):
		}
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
	}
	grew := int64(peak) - int64(base)
	t.Logf("session of %d MiB: the heap grew by %d KiB at most while reading its tree", n*size>>20, grew>>10)
	// Holding the entries grew the heap by ≈ 86 MiB (1.4× the session);
	// the summaries and one 8 MiB read batch, in the client and in the
	// embedded server, by 18–28 MiB under load.
	if grew > n*size*3/4 {
		t.Fatalf("the heap grew by %d KiB reading the tree of a %d KiB session: the entries are held", grew>>10, n*size>>10)
	}
}
