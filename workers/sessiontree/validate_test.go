package sessiontree_test

import (
	"math"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// TestBadInputLeavesTreeValid sends every kind of bad request and checks
// the coded error, then that the tree, the meta and the active path did
// not change.
func TestBadInputLeavesTreeValid(t *testing.T) {
	t.Parallel()
	f := newFixture(t, sessiontree.WithMaxEntrySize(4<<10))
	sid := f.create(t)
	ids := f.chain(t, sid, "", "a", "b", "c")
	other := f.create(t)
	foreign := f.add(t, other, "", "elsewhere")
	next := f.add(t, other, "", "last") // the newest entry in the stream
	seq, err := sessiontree.ParseEntryID(next)
	if err != nil {
		t.Fatal(err)
	}
	unborn := sessiontree.FormatEntryID(seq + 1) // the id the next append would get
	before := f.meta(t, sid)

	msg := user("x")
	big := user(strings.Repeat("x", 5<<10))
	bad := agent.Message{Role: "robot"}
	tests := []struct {
		name string
		call func() error
		code wire.Code
	}{
		{"unknown session append", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: "nope", Message: &msg})
			return err
		}, wire.CodeNotFound},
		{"unknown session messages", func() error {
			_, err := f.s.Messages(ctxT(t), sessiontree.ReadRequest{SessionID: "nope"})
			return err
		}, wire.CodeNotFound},
		{"unknown session tree", func() error {
			_, err := f.s.Tree(ctxT(t), sessiontree.SessionRequest{SessionID: "nope"})
			return err
		}, wire.CodeNotFound},
		{"unknown session fork", func() error {
			_, err := f.s.Fork(ctxT(t), sessiontree.ForkRequest{SessionID: "nope", FromEntryID: ids[0]})
			return err
		}, wire.CodeNotFound},
		{"unknown entry as parent", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, ParentID: "ezzzzzz", Message: &msg})
			return err
		}, wire.CodeNotFound},
		{"unknown entry as leaf", func() error {
			_, err := f.s.Messages(ctxT(t), sessiontree.ReadRequest{SessionID: sid, Leaf: "ezzzzzz"})
			return err
		}, wire.CodeNotFound},
		{"parent from an unrelated session", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, ParentID: foreign, Message: &msg})
			return err
		}, wire.CodeNotFound},
		{"fork at an entry of an unrelated session", func() error {
			_, err := f.s.Fork(ctxT(t), sessiontree.ForkRequest{SessionID: sid, FromEntryID: foreign})
			return err
		}, wire.CodeNotFound},
		{"active leaf from an unrelated session", func() error {
			_, err := f.s.SetActiveLeaf(ctxT(t), sessiontree.SetActiveLeafRequest{SessionID: sid, EntryID: foreign})
			return err
		}, wire.CodeNotFound},
		{"cycle: parent is the entry being appended", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, ParentID: unborn, Message: &msg})
			return err
		}, wire.CodeNotFound},
		{"cycle: active leaf not yet written", func() error {
			_, err := f.s.SetActiveLeaf(ctxT(t), sessiontree.SetActiveLeafRequest{SessionID: sid, EntryID: unborn})
			return err
		}, wire.CodeNotFound},
		{"self-parent: entry carries its own id", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{ID: ids[2], ParentID: ids[2], Type: sessiontree.TypeMessage, Message: &msg}})
			return err
		}, wire.CodeInvalidPayload},
		{"entry carries a parent", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{ParentID: ids[0], Type: sessiontree.TypeMessage, Message: &msg}})
			return err
		}, wire.CodeInvalidPayload},
		{"oversized entry", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Message: &big})
			return err
		}, wire.CodeInvalidPayload},
		{"oversized entry in a batch", func() error {
			_, err := f.s.AppendBatch(ctxT(t), sessiontree.AppendBatchRequest{SessionID: sid, Messages: []agent.Message{msg, big}})
			return err
		}, wire.CodeInvalidPayload},
		{"invalid message in a batch", func() error {
			_, err := f.s.AppendBatch(ctxT(t), sessiontree.AppendBatchRequest{SessionID: sid, Messages: []agent.Message{msg, bad}})
			return err
		}, wire.CodeInvalidPayload},
		{"bad session id", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: "a.b.c", Message: &msg})
			return err
		}, wire.CodeInvalidPayload},
		{"session id of an empty name", func() error {
			_, err := f.s.Create(ctxT(t), sessiontree.CreateRequest{SessionID: "eu."})
			return err
		}, wire.CodeInvalidPayload},
		{"dedup id with a dot", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Message: &msg, DedupID: "a.b"})
			return err
		}, wire.CodeInvalidPayload},
		{"fork into another home region", func() error {
			_, err := f.s.Fork(ctxT(t), sessiontree.ForkRequest{SessionID: sid, FromEntryID: ids[0], NewSessionID: "eu.f"})
			return err
		}, wire.CodeInvalidPayload},
		{"clone into another home region", func() error {
			_, err := f.s.Clone(ctxT(t), sessiontree.CloneRequest{SessionID: sid, NewSessionID: "eu.c"})
			return err
		}, wire.CodeInvalidPayload},
		{"bad parent id", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, ParentID: "E1", Message: &msg})
			return err
		}, wire.CodeInvalidPayload},
		{"zero entry id", func() error {
			_, err := f.s.Messages(ctxT(t), sessiontree.ReadRequest{SessionID: sid, Leaf: "e0"})
			return err
		}, wire.CodeInvalidPayload},
		{"both entry and message", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Message: &msg, Entry: &sessiontree.Entry{Type: sessiontree.TypeMessage, Message: &msg}})
			return err
		}, wire.CodeInvalidPayload},
		{"neither entry nor message", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid})
			return err
		}, wire.CodeInvalidPayload},
		{"unknown entry type", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{Type: "note"}})
			return err
		}, wire.CodeInvalidPayload},
		{"compaction without summary", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{Type: sessiontree.TypeCompaction}})
			return err
		}, wire.CodeInvalidPayload},
		{"compaction keeping an unrelated entry", func() error {
			e := sessiontree.CompactionEntry("s", foreign, 0)
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Entry: &e})
			return err
		}, wire.CodeNotFound},
		{"branch summary from an unknown entry", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{Type: sessiontree.TypeBranchSummary, Summary: "s", FromEntryID: unborn}})
			return err
		}, wire.CodeNotFound},
		{"message fields on a custom entry", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{Type: sessiontree.TypeCustom, CustomType: "x", Message: &msg}})
			return err
		}, wire.CodeInvalidPayload},
		{"custom type with a space", func() error {
			_, err := f.s.Append(ctxT(t), sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{Type: sessiontree.TypeCustom, CustomType: "a b"}})
			return err
		}, wire.CodeInvalidPayload},
		{"create an existing session", func() error {
			_, err := f.s.Create(ctxT(t), sessiontree.CreateRequest{SessionID: sid})
			return err
		}, wire.CodeConflict},
		{"fork into an existing session", func() error {
			_, err := f.s.Fork(ctxT(t), sessiontree.ForkRequest{SessionID: sid, FromEntryID: ids[0], NewSessionID: other})
			return err
		}, wire.CodeConflict},
		{"display name with a control character", func() error {
			_, err := f.s.Create(ctxT(t), sessiontree.CreateRequest{DisplayName: "a\x00b"})
			return err
		}, wire.CodeInvalidPayload},
		{"list limit too large", func() error {
			_, err := f.s.List(ctxT(t), sessiontree.ListRequest{Limit: sessiontree.MaxListLimit + 1})
			return err
		}, wire.CodeInvalidPayload},
		{"list cursor garbage", func() error {
			_, err := f.s.List(ctxT(t), sessiontree.ListRequest{Cursor: "yesterday"})
			return err
		}, wire.CodeInvalidPayload},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.call(), tc.code)
		})
	}
	after := f.meta(t, sid)
	if after.ActiveLeaf != before.ActiveLeaf || after.EntryCount != before.EntryCount || after.LastSeq != before.LastSeq {
		t.Fatalf("meta changed: %+v → %+v", before, after)
	}
	tr := f.checkTree(t, sid)
	if len(tr.Nodes) != 3 {
		t.Fatalf("tree has %d nodes after bad input, want 3", len(tr.Nodes))
	}
	wantTexts(t, f.texts(t, sid, ""), "a", "b", "c")
	wantTexts(t, f.texts(t, other, ""), "elsewhere", "last")
}

func TestEntryID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		seq uint64
		id  string
	}{{1, "e1"}, {35, "ez"}, {36, "e10"}, {1<<64 - 1, "e3w5e11264sgsf"}} {
		if got := sessiontree.FormatEntryID(tc.seq); got != tc.id {
			t.Errorf("FormatEntryID(%d) = %q, want %q", tc.seq, got, tc.id)
		}
		if got, err := sessiontree.ParseEntryID(tc.id); err != nil || got != tc.seq {
			t.Errorf("ParseEntryID(%q) = %d, %v", tc.id, got, err)
		}
	}
	for _, bad := range []string{"", "e", "e0", "e01", "E1", "f1", "e1A", "e-1", "e3w5e11264sgsg", "e1.2", "e" + strings.Repeat("z", 14)} {
		if _, err := sessiontree.ParseEntryID(bad); err == nil {
			t.Errorf("ParseEntryID(%q) accepted", bad)
		}
	}
}

// TestNonFiniteNumbersRefused: an entry is JSON, but a msgpack request
// can carry NaN and infinities (in a custom entry's data, a message's
// usage, details or call arguments). They are invalid_payload; before,
// they were stored, and every session::entries over JSON of a path
// through them (session::messages for a message) failed with internal,
// for good.
func TestNonFiniteNumbersRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid := f.create(t)
	f.add(t, sid, "", "before")
	nan, inf := math.NaN(), math.Inf(1)
	call := agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "f", Arguments: map[string]any{"x": []any{1.0, inf}}}}}
	costly := agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentText, Text: "hi"}}, Usage: &agent.Usage{CostUSD: nan}}
	detailed := agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: "c1", FunctionID: "f", Content: []agent.Content{{Type: agent.ContentText, Text: "ok"}}, Details: map[string]any{"ratio": nan}}
	for _, tc := range []struct {
		name string
		fn   string
		req  any
	}{
		{"custom data", sessiontree.AppendFunction, sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{Type: sessiontree.TypeCustom, CustomType: "x", Data: map[string]any{"v": nan}}}},
		{"call arguments", sessiontree.AppendFunction, sessiontree.AppendRequest{SessionID: sid, Message: &call}},
		{"usage", sessiontree.AppendBatchFunction, sessiontree.AppendBatchRequest{SessionID: sid, Messages: []agent.Message{costly}}},
		{"details", sessiontree.AppendBatchFunction, sessiontree.AppendBatchRequest{SessionID: sid, Entries: []sessiontree.Entry{sessiontree.MessageEntry(detailed)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := wire.Msgpack.Marshal(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = f.e.TriggerRaw(ctxT(t), tc.fn, body, wire.Msgpack)
			wantCode(t, err, wire.CodeInvalidPayload)
			for _, fn := range []string{sessiontree.EntriesFunction, sessiontree.MessagesFunction} {
				if _, err := callJSON(t, f, fn, `{"session_id":"`+sid+`"}`); err != nil {
					t.Fatalf("%s over JSON: %v", fn, err)
				}
			}
		})
	}
	// Finite numbers are fine.
	ok := sessiontree.AppendRequest{SessionID: sid, Entry: &sessiontree.Entry{Type: sessiontree.TypeCustom, CustomType: "x", Data: map[string]any{"v": 1.5, "w": []any{-2.0, math.MaxFloat64}}}}
	body, err := wire.Msgpack.Marshal(ok)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.e.TriggerRaw(ctxT(t), sessiontree.AppendFunction, body, wire.Msgpack); err != nil {
		t.Fatalf("append of finite numbers: %v", err)
	}
}
