package traces_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/workers/traces"
)

// FuzzDecodeSpan: no panic on any input; what decodes re-encodes to a span
// that decodes the same, and can be stored and read back as a tree.
func FuzzDecodeSpan(f *testing.F) {
	good, _ := json.Marshal(span(1, 1, 0, 1000, 2000, "iii.session.id", "s"))
	f.Add(good)
	f.Add([]byte(`{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","name":"x","kind":"server","start_ns":1,"end_ns":2,"status":"error","links":[{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"00f067aa0ba902b7"}],"events":[{"name":"e","time_ns":1}]}`))
	f.Add([]byte(`{"trace_id":"00000000000000000000000000000000"}`))
	f.Add([]byte(`{"trace_id":"0af7651916cd43dd8448eb211c80319c","span_id":"b7ad6b7169203331","start_ns":5,"end_ns":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"attributes":{"iii.session.id":7}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sp, err := traces.DecodeSpan(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(&sp)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		sp2, err := traces.DecodeSpan(again)
		if err != nil {
			t.Fatalf("re-decode %s: %v", again, err)
		}
		third, _ := json.Marshal(&sp2)
		if !bytes.Equal(again, third) {
			t.Fatalf("not stable:\n%s\n%s", again, third)
		}
		s := newStore(t)
		if !s.Add(sp) {
			if sp.EndNs > time.Now().Add(traces.MaxClockSkew).UnixNano() {
				return // ends in the future: refused
			}
			t.Fatal("valid span refused")
		}
		tree, err := s.Tree(sp.TraceID)
		if err != nil || tree.SpanCount != 1 || len(tree.Spans) != 1 {
			t.Fatalf("tree %+v %v", tree, err)
		}
		for _, a := range []string{"iii.session.id", "iii.message.id", "iii.function.id"} {
			if _, err := s.GroupBy(traces.GroupByRequest{Attribute: a}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzTree: any parent relation among a trace's spans yields a tree that
// holds every span exactly once.
func FuzzTree(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 2, 3})
	f.Add([]byte{1, 2, 3, 1})
	f.Add([]byte{5, 5, 5, 5, 5})
	f.Fuzz(func(t *testing.T, parents []byte) {
		if len(parents) > 200 {
			parents = parents[:200]
		}
		s := newStore(t)
		for i, p := range parents {
			// p == 0: a root; otherwise parent span p-1 (which may be
			// missing, itself, or later).
			s.Add(span(1, i, int(p)-1, int64(p), int64(p)+10))
		}
		if len(parents) == 0 {
			return
		}
		tree, err := s.Tree(tid(1))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		var walk func([]*traces.TreeNode)
		walk = func(ns []*traces.TreeNode) {
			for _, n := range ns {
				seen[n.SpanID]++
				walk(n.Children)
			}
		}
		walk(tree.Spans)
		if len(seen) != len(parents) || tree.SpanCount != len(parents) {
			t.Fatalf("%d spans in tree, %d added", len(seen), len(parents))
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("span %s %d times", id, n)
			}
		}
	})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
