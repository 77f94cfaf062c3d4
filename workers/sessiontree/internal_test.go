package sessiontree

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), enginetest.Engine(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func batchOf(prefix string, n int) []agent.Message {
	out := make([]agent.Message, n)
	for i := range out {
		out[i] = agent.UserText(fmt.Sprintf("%s%d", prefix, i), 1)
	}
	return out
}

// TestReadsFollowThePath: reading a path costs entries and round trips in
// proportion to the path (its length, its runs), not to the session.
func TestReadsFollowThePath(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := openTest(t)
	c, err := s.Create(ctx, CreateRequest{SessionID: "big"})
	if err != nil {
		t.Fatal(err)
	}
	long, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: c.SessionID, Messages: batchOf("l", 400)})
	if err != nil {
		t.Fatal(err)
	}
	root := long.EntryIDs[0]
	short, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: c.SessionID, ParentID: root, Messages: batchOf("s", 3)})
	if err != nil {
		t.Fatal(err)
	}
	// More of the long branch after the short one: interleaved runs.
	more, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: c.SessionID, ParentID: long.EntryIDs[399], Messages: batchOf("m", 100)})
	if err != nil {
		t.Fatal(err)
	}

	read := func(leaf string) (entries, trips int64, n int) {
		t.Helper()
		f0, t0 := s.fetched.Load(), s.trips.Load()
		r, err := s.Messages(ctx, ReadRequest{SessionID: c.SessionID, Leaf: leaf})
		if err != nil {
			t.Fatal(err)
		}
		entries, trips = s.fetched.Load()-f0, s.trips.Load()-t0
		t.Logf("path to %s: %d messages, %d entries read in %d round trips", leaf, len(r.Messages), entries, trips)
		return entries, trips, len(r.Messages)
	}
	// leaf lookup + last-entry check + the short run + the root.
	if e, tr, n := read(short.EntryIDs[2]); n != 4 || e > 7 || tr > 5 {
		t.Errorf("short path of 4 in a session of 504: %d messages, read %d entries in %d round trips", n, e, tr)
	}
	// One run of 400, then one of 100: two round trips per run.
	if e, tr, n := read(more.EntryIDs[99]); n != 500 || e > 503 || tr > 6 {
		t.Errorf("long path of 500: %d messages, read %d entries in %d round trips", n, e, tr)
	}
	// Ancestry through the fork point costs one get per run too.
	f, err := s.Fork(ctx, ForkRequest{SessionID: c.SessionID, FromEntryID: more.EntryIDs[50]})
	if err != nil {
		t.Fatal(err)
	}
	t0 := s.trips.Load()
	if _, err := s.Append(ctx, AppendRequest{SessionID: f.SessionID, ParentID: long.EntryIDs[10], Message: &agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text("x")}}}); err != nil {
		t.Fatal(err)
	}
	if tr := s.trips.Load() - t0; tr > 5 {
		t.Errorf("append under an inherited entry took %d stream round trips", tr)
	}
}

// TestAppendIsConstant: an append reads no history, however long the
// session is.
func TestAppendIsConstant(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := openTest(t)
	c, err := s.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: c.SessionID, Messages: batchOf("x", 300)}); err != nil {
		t.Fatal(err)
	}
	f0 := s.fetched.Load()
	m := agent.UserText("one more", 1)
	if _, err := s.Append(ctx, AppendRequest{SessionID: c.SessionID, Message: &m}); err != nil {
		t.Fatal(err)
	}
	if n := s.fetched.Load() - f0; n > 1 {
		t.Fatalf("append read %d entries", n)
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"  a\n\tb  ", "a b"},
		{"abcdef", "abcd…"},
		{"abcde", "abcde"},
		{"ab\x00c\x1b", "abc"},
		{"ab  \n   cdefgh", "ab c…"},
		{"héllo wörld", "héll…"},
	} {
		if got := oneLine(tc.in, 5); got != tc.want {
			t.Errorf("oneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestSlowPaths: a run that does not come whole in one batch is read on
// (here one entry a batch), and a get the direct API misses is asked of
// the leader.
func TestSlowPaths(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := openTest(t)
	c, err := s.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: c.SessionID, Messages: batchOf("x", 20)})
	if err != nil {
		t.Fatal(err)
	}
	s.runBytes = 1 // one message per batch
	r, err := s.Messages(ctx, ReadRequest{SessionID: c.SessionID})
	if err != nil || len(r.Messages) != 20 || r.Messages[19].Message.Content[0].Text != "x19" {
		t.Fatalf("messages = %d, %v", len(r.Messages), err)
	}
	seq, _ := ParseEntryID(ids.EntryIDs[3])
	n, err := s.leaderGet(ctx, EntryStream, seq)
	if err != nil || n.id() != ids.EntryIDs[3] || n.sid != c.SessionID || n.rec.Depth != 3 {
		t.Fatalf("leaderGet = %+v, %v", n, err)
	}
	if _, err := s.leaderGet(ctx, EntryStream, 1<<40); !errors.Is(err, errNoEntry) {
		t.Fatalf("leaderGet of nothing = %v", err)
	}
}

// TestRunOverTheBatchBound: a run bigger than one batch's byte bound is
// read on by further batches, not entry by entry (a 36 MB path took a
// round trip per entry), with the same result, in every bound and path
// shape.
func TestRunOverTheBatchBound(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := openTest(t)
	const n = 60
	pad := strings.Repeat("x", 1000) // about 1 KB an entry
	c, err := s.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]agent.Message, n)
	for i := range msgs {
		msgs[i] = agent.UserText(fmt.Sprint(i, pad), 1)
	}
	long, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: c.SessionID, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	// A fork appending to the middle: a path of two runs, the inherited
	// one read up to the fork point only.
	f, err := s.Fork(ctx, ForkRequest{SessionID: c.SessionID, FromEntryID: long.EntryIDs[n/2]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: f.SessionID, Messages: msgs[:10]}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		sid      string
		runBytes int
		want     int
		// maxTrips bounds the round trips: the old entry-by-entry read
		// took one per entry past the first batch.
		maxTrips int64
	}{
		{"whole run in one batch", c.SessionID, maxRunBytes, n, 4},
		{"about 4 entries a batch", c.SessionID, 4 << 10, n, 4 + n/3},
		{"one entry a batch", c.SessionID, 1, n, 4 + n},
		{"fork, about 8 entries a batch", f.SessionID, 8 << 10, n/2 + 11, 8 + (n/2+11)/6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.runBytes = tc.runBytes
			t0 := s.trips.Load()
			r, err := s.Messages(ctx, ReadRequest{SessionID: tc.sid})
			if err != nil {
				t.Fatal(err)
			}
			trips := s.trips.Load() - t0
			if len(r.Messages) != tc.want {
				t.Fatalf("%d messages, want %d", len(r.Messages), tc.want)
			}
			for i, m := range r.Messages {
				if want := fmt.Sprint(i%(n/2+1), pad); i <= n/2 && m.Message.Content[0].Text != want {
					t.Fatalf("message %d = %.8q…, want %.8q…", i, m.Message.Content[0].Text, want)
				}
			}
			if trips > tc.maxTrips {
				t.Fatalf("read the path in %d round trips, want at most %d", trips, tc.maxTrips)
			}
		})
	}
}

// TestKeptFailures: a deferred meta whose write keeps failing (a stream
// without a leader fails every session's write at once) is counted, and
// logged at warn level at its first failure and about once a minute, at
// debug level otherwise.
func TestKeptFailures(t *testing.T) {
	for _, tc := range []struct {
		failed int
		want   slog.Level
	}{
		{0, slog.LevelWarn}, {1, slog.LevelWarn}, {2, slog.LevelDebug}, {29, slog.LevelDebug},
		{warnEvery, slog.LevelWarn}, {warnEvery + 1, slog.LevelDebug}, {2 * warnEvery, slog.LevelWarn},
	} {
		if got := keptFailureLevel(tc.failed); got != tc.want {
			t.Errorf("failure %d logged at %v, want %v", tc.failed, got, tc.want)
		}
	}
	s := &Store{kept: map[string]*keptFold{}, opts: options{now: time.Now}}
	k := &keptFold{last: node{seq: 5}}
	s.restoreKept("s1", k)
	s.restoreKept("s1", &keptFold{last: node{seq: 4}, failed: 1}) // an older fold's second failure, a newer one kept
	got := s.kept["s1"]
	got.timer.Stop()
	if got != k || got.failed != 2 || got.last.seq != 5 {
		t.Fatalf("kept %+v, want the first fold, failed twice, at seq 5", got)
	}
}

// BenchmarkLongPath reads the messages of a session that is one long
// chain: 10,000 short entries, and 1,200 of 30 KB (36 MB, over one
// batch's byte bound). It reports the round trips and entries read per
// read, which follow the path's runs and length.
func BenchmarkLongPath(b *testing.B) {
	for _, tc := range []struct{ entries, bytes int }{{10_000, 60}, {1_200, 30_000}} {
		b.Run(fmt.Sprintf("entries=%d,bytes=%d", tc.entries, tc.bytes), func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, enginetest.Engine(b))
			if err != nil {
				b.Fatal(err)
			}
			c, err := s.Create(ctx, CreateRequest{})
			if err != nil {
				b.Fatal(err)
			}
			pad := strings.Repeat("x", tc.bytes)
			for done := 0; done < tc.entries; {
				k := min(200, tc.entries-done)
				msgs := make([]agent.Message, k)
				for i := range msgs {
					msgs[i] = agent.UserText(fmt.Sprint(done+i, pad), 1)
				}
				if _, err := s.AppendBatch(ctx, AppendBatchRequest{SessionID: c.SessionID, Messages: msgs}); err != nil {
					b.Fatal(err)
				}
				done += k
			}
			b.ReportAllocs()
			t0, f0 := s.trips.Load(), s.fetched.Load()
			for b.Loop() {
				r, err := s.Messages(ctx, ReadRequest{SessionID: c.SessionID})
				if err != nil || len(r.Messages) != tc.entries {
					b.Fatalf("%d messages, %v", len(r.Messages), err)
				}
			}
			b.ReportMetric(float64(s.trips.Load()-t0)/float64(b.N), "trips/op")
			b.ReportMetric(float64(s.fetched.Load()-f0)/float64(b.N), "entries/op")
		})
	}
}

// TestLeafCacheKeepsBigEntriesOut: an appended entry whose encoding is
// bigger than leafCacheMaxBytes is not kept, whatever holds its bytes.
// Before, only a message's text and data counted: a function call's
// arguments (a file an agent writes), a custom entry's data or a
// compaction's summary of 100 KB were kept, up to 1,024 of them.
func TestLeafCacheKeepsBigEntriesOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := openTest(t)
	c, err := s.Create(ctx, CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Append(ctx, AppendRequest{SessionID: c.SessionID, Message: new(agent.UserText("hi", 1))})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 100<<10)
	call := agent.Message{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall, Timestamp: 1, Content: []agent.Content{
		{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "fs::write", Arguments: map[string]any{"content": big}},
	}}
	for _, tc := range []struct {
		name   string
		entry  Entry
		cached bool
	}{
		{"small message", MessageEntry(agent.UserText("short", 1)), true},
		{"big text", MessageEntry(agent.UserText(big, 1)), false},
		{"big function call arguments", MessageEntry(call), false},
		{"big custom data", Entry{Type: TypeCustom, CustomType: "ui_state", Data: map[string]any{"blob": big}}, false},
		{"big compaction summary", CompactionEntry(big, first.EntryID, 1), false},
		{"big branch summary", Entry{Type: TypeBranchSummary, Summary: big, FromEntryID: first.EntryID}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.Append(ctx, AppendRequest{SessionID: c.SessionID, Entry: &tc.entry})
			if err != nil {
				t.Fatal(err)
			}
			seq, err := ParseEntryID(r.EntryID)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := s.leaves.get("", seq); ok != tc.cached {
				t.Fatalf("cached %v, want %v", ok, tc.cached)
			}
		})
	}
}
