package sessiontree

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// plainRecord has record's fields and tags but not its codec methods: the
// reflective codec encodes it.
type plainRecord record

// TestRecordCodecMatchesReflective: the hand codec writes the bytes the
// reflective codec writes, and reads them back.
func TestRecordCodecMatchesReflective(t *testing.T) {
	t.Parallel()
	msg := agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text("hi")}, Timestamp: 5}
	for _, r := range []record{
		{V: 1, Type: TypeMessage, Timestamp: 1, Message: &msg, N: 1},
		{V: 1, Type: TypeCompaction, ParentID: "e5", Summary: "s", FirstKeptEntryID: "e3", TokensBefore: 9, Depth: 4, N: 7, Run: 8, RunDepth: 2, RunParent: "e2"},
		{V: 1, Type: TypeBranchSummary, ParentID: "e5", Summary: "b", FromEntryID: "e4", Depth: 1, N: 2},
		{V: 1, Type: TypeCustom, ParentID: "e1", CustomType: "x", Data: []any{"a", int64(1), nil, true, map[string]any{"k": "v"}}, Depth: 1, N: 2, Run: 1},
	} {
		hand, err := wire.Msgpack.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		p := plainRecord(r)
		refl, err := wire.Msgpack.Marshal(&p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(hand, refl) {
			t.Errorf("%s: hand codec\n%x\nreflective\n%x", r.Type, hand, refl)
		}
		var back record
		err = wire.Msgpack.Unmarshal(refl, &back)
		// Integers in data come back in the smallest type that holds
		// them: compare the JSON views.
		got, _ := json.Marshal(back)
		want, _ := json.Marshal(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: decoded %s, %v; want %s", r.Type, got, err, want)
		}
	}
	// Unknown keys are skipped, long ones included.
	extra := map[string]any{"v": 1, "type": "custom", "custom_type": "x", "n": 1, "depth": 0, "future": []any{1, 2}, "a-much-longer-key-than-thirty-two-bytes": "x"}
	b, err := wire.Msgpack.Marshal(extra)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeRecord(b, 1)
	if err != nil || r.CustomType != "x" {
		t.Fatalf("decode with unknown keys = %+v, %v", r, err)
	}
}
