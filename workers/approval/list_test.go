package approval

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

func listPending(t *testing.T, f *fixture, sid string) []Pending {
	t.Helper()
	resp, err := engine.Call[ListPendingResponse](context.Background(), f.e, ListPendingFunction, ListPendingRequest{SessionID: sid})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Pending == nil {
		t.Fatal("pending is nil")
	}
	return resp.Pending
}

func ids(ps []Pending) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.SessionID + "/" + p.FunctionCallID
	}
	return out
}

func TestListPending(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()

	// Empty bucket: [] over JSON, never null.
	nc := enginetest.Connect(t, f.ns)
	subj := subjects.MustFunctionSubject(ListPendingFunction)
	for _, body := range []string{"", "{}", `{"session_id":"s1"}`} {
		m, err := nc.Request(subj, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if we := wire.Decode(m); we != nil {
			t.Fatalf("%q: %v", body, we)
		}
		if string(m.Data) != `{"pending":[]}` {
			t.Fatalf("%q: empty list is %s", body, m.Data)
		}
	}

	// s1: three calls, two at the same time (ordered by key); s10 shares
	// a prefix with s1; s2 has one.
	r1 := record(t, "s1", "c_b", "fs::write", map[string]any{"path": "/a"}, 300)
	r2 := record(t, "s1", "c_a", "fs::write", map[string]any{"path": "/b"}, 300)
	r3 := record(t, "s1", "c_c", "shell::exec", nil, 100)
	r4 := record(t, "s10", "c_a", "fs::read", nil, 200)
	r5 := record(t, "s2", "toolu:01", "fs::read", map[string]any{"n": 1.0}, 50)
	for _, r := range []agent.ApprovalRecord{r1, r2, r3, r4, r5} {
		park(t, f.approvals, r)
	}
	// Left out: decided, undecodable, deleted, and a key that is not an
	// approval key.
	decided := record(t, "s1", "c_decided", "x::y", nil, 1)
	decided.Status, decided.Decision = agent.ApprovalDecided, "allow"
	park(t, f.approvals, decided)
	parkRaw(t, f.approvals, "s1", "c_junk", []byte("not json"))
	gone, _ := park(t, f.approvals, record(t, "s1", "c_gone", "x::y", nil, 2))
	if err := f.approvals.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"no_dot_key", "s1.x.y"} { // "s1.x.y" would be call id "x/y"
		if _, err := f.approvals.Put(ctx, k, []byte(`{"status":"pending"}`)); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		sid  string
		want []string
	}{
		{"", []string{"s2/toolu:01", "s1/c_c", "s10/c_a", "s1/c_a", "s1/c_b"}},
		{"s1", []string{"s1/c_c", "s1/c_a", "s1/c_b"}},
		{"s10", []string{"s10/c_a"}},
		{"s2", []string{"s2/toolu:01"}},
		{"s3", []string{}},
	}
	for _, tc := range tests {
		got := listPending(t, f, tc.sid)
		if g, w := mustJSON(t, ids(got)), mustJSON(t, tc.want); g != w {
			t.Errorf("list_pending(%q) = %s, want %s", tc.sid, g, w)
		}
	}
	// The fields.
	got := listPending(t, f, "s2")
	want := Pending{SessionID: "s2", FunctionCallID: "toolu:01", FunctionID: "fs::read", Args: map[string]any{"n": 1.0}, ArgsHash: r5.ArgsHash, RequestedAt: 50}
	if g, w := mustJSON(t, got[0]), mustJSON(t, want); g != w {
		t.Fatalf("pending\n got %s\nwant %s", g, w)
	}
	// Nil args read as {} on the wire.
	m, err := nc.Request(subj, []byte(`{"session_id":"s10"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"pending":[{"session_id":"s10","function_call_id":"c_a","function_id":"fs::read","args":{},"args_hash":"` + r4.ArgsHash + `","requested_at":200}]}`; string(m.Data) != want {
		t.Fatalf("JSON list\n got %s\nwant %s", m.Data, want)
	}

	// A resolved call leaves the list.
	if err := resolve(ctx, f.e, ResolveRequest{SessionID: "s1", FunctionCallID: "c_a", Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	if g := mustJSON(t, ids(listPending(t, f, "s1"))); g != `["s1/c_c","s1/c_b"]` {
		t.Fatalf("after resolve: %s", g)
	}
}

// Many records: the snapshot is complete (more than the watcher's buffer).
func TestListPendingMany(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 600
	for i := range n {
		park(t, f.approvals, record(t, "s1", "c"+strconv.Itoa(i), "x::y", nil, int64(n-i)))
	}
	got := listPending(t, f, "")
	if len(got) != n {
		t.Fatalf("%d pending, want %d", len(got), n)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].RequestedAt > got[i].RequestedAt {
			t.Fatalf("not oldest first at %d: %d > %d", i, got[i-1].RequestedAt, got[i].RequestedAt)
		}
	}
}

// More pending calls than one message holds: the answer lists the oldest
// that fit, in either codec, and counts the others in omitted, instead of
// failing as a whole (internal: response exceeds the max payload) and
// listing nothing.
func TestListPendingOverMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	fractions := make([]any, 1000)
	for i := range fractions {
		fractions[i] = 0.5
	}
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"heavier in JSON", map[string]any{"body": strings.Repeat(`"`, 3000)}}, // \" in JSON
		{"heavier in msgpack", map[string]any{"xs": fractions}},                // 9 bytes each
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload))
			e := enginetest.NewEngine(t, ns)
			ctx := context.Background()
			w := NewWorker()
			if err := w.Start(ctx, e); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Close(context.Background()) })
			approvals, err := e.EnsureKV(ctx, ApprovalsBucketConfig())
			if err != nil {
				t.Fatal(err)
			}
			const n = 20
			for i := range n {
				park(t, approvals, record(t, "s"+strconv.Itoa(i), "c", "fs::write", tc.args, int64(100+i)))
			}
			nc := enginetest.Connect(t, ns)
			subj := subjects.MustFunctionSubject(ListPendingFunction)
			for _, ct := range []string{wire.ContentJSON, wire.ContentMsgpack} {
				codec := wire.ForContentType(ct)
				body, err := codec.Marshal(ListPendingRequest{})
				if err != nil {
					t.Fatal(err)
				}
				m, err := nc.RequestMsg(&nats.Msg{Subject: subj, Data: body, Header: nats.Header{wire.HeaderContentType: {ct}}}, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if we := wire.Decode(m); we != nil {
					t.Fatalf("%s: %v", ct, we)
				}
				var resp ListPendingResponse
				if err := codec.Unmarshal(m.Data, &resp); err != nil {
					t.Fatal(err)
				}
				if len(resp.Pending) == 0 || resp.Omitted == 0 || len(resp.Pending)+resp.Omitted != n {
					t.Fatalf("%s: %d listed, %d omitted; want some of each, %d in all", ct, len(resp.Pending), resp.Omitted, n)
				}
				for i, p := range resp.Pending {
					if p.SessionID != "s"+strconv.Itoa(i) {
						t.Fatalf("%s: not the oldest first: %v", ct, ids(resp.Pending))
					}
				}
			}
			// One session's list fits.
			resp, err := engine.Call[ListPendingResponse](ctx, e, ListPendingFunction, ListPendingRequest{SessionID: "s19"})
			if err != nil || len(resp.Pending) != 1 || resp.Omitted != 0 {
				t.Fatalf("one session: %+v %v", resp, err)
			}
		})
	}
}

// A pending call too large to be listed even alone (its record fits a
// message, its listing in msgpack does not) is passed over and counted in
// omitted: the calls after it are listed. Before, the list stopped at it,
// so an oldest call of that size hid every pending call, in every codec.
func TestListPendingPassesOverCallTooLargeToList(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(maxPayload))
	e := enginetest.NewEngine(t, ns)
	ctx := context.Background()
	w := NewWorker()
	if err := w.Start(ctx, e); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	approvals, err := e.EnsureKV(ctx, ApprovalsBucketConfig())
	if err != nil {
		t.Fatal(err)
	}
	fractions := make([]any, 10_000) // about 40 KiB of JSON, 90 KiB of msgpack
	for i := range fractions {
		fractions[i] = 0.5
	}
	park(t, approvals, record(t, "big", "c", "vec::upsert", map[string]any{"xs": fractions}, 1))
	for i := range 3 {
		park(t, approvals, record(t, "s"+strconv.Itoa(i), "c", "fs::write", map[string]any{"path": "/x"}, int64(10+i)))
	}
	nc := enginetest.Connect(t, ns)
	subj := subjects.MustFunctionSubject(ListPendingFunction)
	for _, tc := range []struct {
		sid, want string
		omitted   int
	}{
		{"", `["s0/c","s1/c","s2/c"]`, 1},
		{"big", `[]`, 1},
		{"s1", `["s1/c"]`, 0},
	} {
		for _, ct := range []string{wire.ContentJSON, wire.ContentMsgpack} {
			codec := wire.ForContentType(ct)
			body, err := codec.Marshal(ListPendingRequest{SessionID: tc.sid})
			if err != nil {
				t.Fatal(err)
			}
			m, err := nc.RequestMsg(&nats.Msg{Subject: subj, Data: body, Header: nats.Header{wire.HeaderContentType: {ct}}}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if we := wire.Decode(m); we != nil {
				t.Fatalf("%q %s: %v", tc.sid, ct, we)
			}
			var resp ListPendingResponse
			if err := codec.Unmarshal(m.Data, &resp); err != nil {
				t.Fatal(err)
			}
			if g := mustJSON(t, ids(resp.Pending)); g != tc.want || resp.Omitted != tc.omitted {
				t.Errorf("%q %s: listed %s, omitted %d; want %s, omitted %d", tc.sid, ct, g, resp.Omitted, tc.want, tc.omitted)
			}
		}
	}
}
