package sessiontree

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// TestSlowPaths: a run that does not come whole in one batch is read entry
// by entry, and a get the direct API misses is asked of the leader.
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
