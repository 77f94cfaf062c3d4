package sessiontree

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/subjects"
)

func FuzzEntryID(f *testing.F) {
	for _, s := range []string{"e1", "ez", "e10", "e3w5e11264sgsf", "e0", "E1", "e", "", "e01", "e3w5e11264sgsg"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		seq, err := ParseEntryID(id)
		if err != nil {
			return
		}
		if seq == 0 || FormatEntryID(seq) != id {
			t.Fatalf("ParseEntryID(%q) = %d, formats back to %q", id, seq, FormatEntryID(seq))
		}
		if err := subjects.ValidateID("entry_id", id); err != nil {
			t.Fatalf("entry id %q is not a valid id: %v", id, err)
		}
	})
}

// seedRecords are valid records of every type, encoded.
func seedRecords(f *testing.F) {
	msg := agent.Message{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall, Content: []agent.Content{
		agent.Text("hi"), {Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "fs::read", Arguments: map[string]any{"path": "/x", "n": 1.5}},
	}, Usage: &agent.Usage{InputTokens: 3}}
	for _, r := range []record{
		{V: recordVersion, Type: TypeMessage, Timestamp: 1, Message: &msg, N: 1},
		{V: recordVersion, Type: TypeCompaction, ParentID: "e5", Summary: "s", FirstKeptEntryID: "e3", TokensBefore: 9, Depth: 4, N: 7, Run: 8, RunDepth: 2, RunParent: "e2"},
		{V: recordVersion, Type: TypeBranchSummary, ParentID: "e5", Summary: "b", FromEntryID: "e4", Depth: 1, N: 2},
		{V: recordVersion, Type: TypeCustom, ParentID: "e1", CustomType: "x", Data: map[string]any{"a": []any{1, "b", nil, true}}, Depth: 1, N: 2, Run: 1},
	} {
		b, err := encodeRecord(&r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint64(10))
	}
	f.Add([]byte{0x80}, uint64(1))
	f.Add([]byte("garbage"), uint64(3))
}

func FuzzRecordCodec(f *testing.F) {
	seedRecords(f)
	f.Fuzz(func(t *testing.T, data []byte, seq uint64) {
		if seq == 0 {
			seq = 1
		}
		r, err := decodeRecord(data, seq)
		if err != nil {
			return
		}
		b1, err := encodeRecord(&r)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		r2, err := decodeRecord(b1, seq)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		// Maps encode in any key order: compare the JSON views.
		// (A NaN in data has no JSON view.)
		j1, err1 := json.Marshal(r)
		j2, err2 := json.Marshal(r2)
		if err1 == nil && (err2 != nil || !bytes.Equal(j1, j2)) {
			t.Fatalf("round trip changed the record:\n%s\n%s (%v, %v)", j1, j2, err1, err2)
		}
		e := r.entry(seq)
		if e.ID != FormatEntryID(seq) || e.Type != r.Type {
			t.Fatalf("entry view %+v", e)
		}
		_ = entrySummary(r)
		if r.Type == TypeMessage && r.Message != nil {
			_ = userSummary(r)
		}
	})
}

func FuzzAppendRequestJSON(f *testing.F) {
	for _, s := range []string{
		`{"session_id":"s1","message":{"role":"user","content":[{"type":"text","text":"hi"}]}}`,
		`{"session_id":"s1","parent_id":"e2","entry":{"type":"compaction","summary":"s","first_kept_entry_id":"e1"}}`,
		`{"session_id":"s1","entry":{"type":"custom","custom_type":"k","data":[1,2]}}`,
		`{"session_id":"s1","entries":[{"type":"branch_summary","summary":"s","from_entry_id":"e9"}],"dedup_id":"d"}`,
		`{"session_id":"s1","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"dedup_id":"d","dedup_since_ms":1765000000000}`,
		`{"session_id":"s1","message":{"role":"user","content":[{"type":"text","text":"hi"}]},"dedup_since_ms":5}`,
		`{}`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var a AppendRequest
		if json.Unmarshal(data, &a) == nil && a.Validate() == nil {
			if len(a.entries()) != 1 {
				t.Fatal("a valid append has one entry")
			}
			if a.DedupSinceMs < 0 || a.DedupSinceMs > 0 && a.DedupID == "" {
				t.Fatalf("valid append with dedup_since_ms %d, dedup_id %q", a.DedupSinceMs, a.DedupID)
			}
		}
		var b AppendBatchRequest
		if json.Unmarshal(data, &b) == nil && b.Validate() == nil {
			if n := len(b.entries()); n == 0 || n > MaxBatchEntries {
				t.Fatalf("a valid batch has %d entries", n)
			}
			if b.DedupSinceMs < 0 || b.DedupSinceMs > 0 && b.DedupID == "" {
				t.Fatalf("valid batch with dedup_since_ms %d, dedup_id %q", b.DedupSinceMs, b.DedupID)
			}
		}
	})
}

func FuzzOneLine(f *testing.F) {
	for _, s := range []string{"", "a\nb", "héllo\x00", strings.Repeat("ab ", 100), "\xff\xfe"} {
		f.Add(s, 10)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 1 || n > 500 {
			return
		}
		out := oneLine(s, n)
		if !utf8.ValidString(out) || utf8.RuneCountInString(out) > n || strings.ContainsAny(out, "\n\r\t") {
			t.Fatalf("oneLine(%q, %d) = %q", s, n, out)
		}
	})
}
