package sessiontree

import (
	"context"
	"fmt"
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
