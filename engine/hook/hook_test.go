package hook_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/hook"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := hook.Request{Topic: hook.TopicBeforeCall, MergeRule: hook.FirstBlockWins}
	with := func(f func(*hook.Request)) hook.Request { r := ok; f(&r); return r }
	tests := []struct {
		name  string
		req   hook.Request
		valid bool
	}{
		{"minimal", ok, true},
		{"after call", with(func(r *hook.Request) { r.Topic, r.MergeRule = hook.TopicAfterCall, hook.FieldMerge }), true},
		{"pipeline", with(func(r *hook.Request) { r.MergeRule = hook.PipelineLastWins }), true},
		{"single segment topic", with(func(r *hook.Request) { r.Topic = "audit" }), true},
		{"escaped topic", with(func(r *hook.Request) { r.Topic = "a.b::c*" }), true},
		{"max timeout", with(func(r *hook.Request) { r.TimeoutMs = 60000 }), true},
		{"max expected", with(func(r *hook.Request) { r.ExpectedReplies = 1000 }), true},
		{"quiescence = default timeout", with(func(r *hook.Request) { r.QuiescenceMs = 1000 }), true},
		{"quiescence = timeout", with(func(r *hook.Request) { r.TimeoutMs, r.QuiescenceMs = 5000, 5000 }), true},
		{"empty topic", with(func(r *hook.Request) { r.Topic = "" }), false},
		{"empty segment", with(func(r *hook.Request) { r.Topic = "agent::" }), false},
		{"whitespace topic", with(func(r *hook.Request) { r.Topic = "agent::before call" }), false},
		{"newline topic", with(func(r *hook.Request) { r.Topic = "agent\n" }), false},
		{"missing merge rule", with(func(r *hook.Request) { r.MergeRule = "" }), false},
		{"unknown merge rule", with(func(r *hook.Request) { r.MergeRule = "last_wins" }), false},
		{"merge rule case", with(func(r *hook.Request) { r.MergeRule = "FIELD_MERGE" }), false},
		{"negative timeout", with(func(r *hook.Request) { r.TimeoutMs = -1 }), false},
		{"huge timeout", with(func(r *hook.Request) { r.TimeoutMs = 60001 }), false},
		{"negative expected", with(func(r *hook.Request) { r.ExpectedReplies = -1 }), false},
		{"huge expected", with(func(r *hook.Request) { r.ExpectedReplies = 1001 }), false},
		{"negative quiescence", with(func(r *hook.Request) { r.QuiescenceMs = -1 }), false},
		{"quiescence over default timeout", with(func(r *hook.Request) { r.QuiescenceMs = 1001 }), false},
		{"quiescence over timeout", with(func(r *hook.Request) { r.TimeoutMs, r.QuiescenceMs = 100, 101 }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.req.Validate()
			if tc.valid && err != nil {
				t.Fatalf("Validate = %v", err)
			}
			if !tc.valid && !errors.Is(err, hook.ErrInvalidRequest) {
				t.Fatalf("Validate = %v, want ErrInvalidRequest", err)
			}
		})
	}
}

func TestRequestJSON(t *testing.T) {
	t.Parallel()
	var r hook.Request
	body := `{"topic":"agent::before_function_call","payload":{"a":[1]},"merge_rule":"first_block_wins","timeout_ms":500,"expected_replies":2,"quiescence_ms":30}`
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r)
	if string(b) != body {
		t.Fatalf("round trip %s", b)
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	block := map[string]any{"block": true, "reason": "no"}
	rewrite := map[string]any{"args": map[string]any{"p": "/safe"}}
	a := map[string]any{"a": 1.0, "k": "a"}
	b := map[string]any{"b": 2.0, "k": "b"}
	tests := []struct {
		name    string
		rule    hook.MergeRule
		replies []map[string]any
		want    string
	}{
		{"none, first block", hook.FirstBlockWins, nil, `{}`},
		{"none, field", hook.FieldMerge, nil, `{}`},
		{"none, pipeline", hook.PipelineLastWins, []map[string]any{}, `{}`},
		{"field merge", hook.FieldMerge, []map[string]any{a, b}, `{"a":1,"b":2,"k":"b"}`},
		{"field merge reversed", hook.FieldMerge, []map[string]any{b, a}, `{"a":1,"b":2,"k":"a"}`},
		{"pipeline", hook.PipelineLastWins, []map[string]any{a, b}, `{"b":2,"k":"b"}`},
		{"pipeline nil reply", hook.PipelineLastWins, []map[string]any{a, nil}, `{}`},
		{"block wins over rewrite", hook.FirstBlockWins, []map[string]any{rewrite, block}, `{"block":true,"reason":"no"}`},
		{"first block", hook.FirstBlockWins, []map[string]any{{"block": true, "reason": "1"}, {"block": true, "reason": "2"}}, `{"block":true,"reason":"1"}`},
		{"no block merges", hook.FirstBlockWins, []map[string]any{{"block": false}, rewrite}, `{"args":{"p":"/safe"},"block":false}`},
		{"block must be bool", hook.FirstBlockWins, []map[string]any{{"block": 1.0}, {"block": "true"}}, `{"block":"true"}`},
		// null is no answer: a later hook's {"result":null} (keep it)
		// does not undo an earlier hook's redaction, in either order.
		{"null does not override", hook.FieldMerge, []map[string]any{{"result": "redacted"}, {"result": nil}}, `{"result":"redacted"}`},
		{"null then value", hook.FieldMerge, []map[string]any{{"result": nil}, {"result": "redacted"}}, `{"result":"redacted"}`},
		{"null alone", hook.FieldMerge, []map[string]any{{"result": nil}, {"a": 1.0}}, `{"a":1,"result":null}`},
		{"null args keep a rewrite", hook.FirstBlockWins, []map[string]any{rewrite, {"args": nil, "block": false}}, `{"args":{"p":"/safe"},"block":false}`},
		{"unknown rule merges fields", "other", []map[string]any{a, b}, `{"a":1,"b":2,"k":"b"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := hook.Merge(tc.rule, tc.replies)
			if got == nil {
				t.Fatal("nil merged")
			}
			if s := mustJSON(t, got); s != tc.want {
				t.Fatalf("merged %s, want %s", s, tc.want)
			}
			// merged is a new map: writing it leaves the replies alone.
			got["zz"] = 1
			for _, r := range tc.replies {
				if _, ok := r["zz"]; ok {
					t.Fatal("merged aliases a reply")
				}
			}
		})
	}
}

func TestBind(t *testing.T) {
	t.Parallel()
	res := hook.Result{Merged: map[string]any{"block": false, "args": map[string]any{"path": "/safe"}}}
	var before hook.BeforeReply
	if err := res.Bind(&before); err != nil || before.Block || before.Args["path"] != "/safe" {
		t.Fatalf("bind %+v %v", before, err)
	}

	res = hook.Result{Merged: map[string]any{"result": map[string]any{"content": []any{map[string]any{"type": "text", "text": "[redacted]"}}, "is_error": false}}}
	var after hook.AfterReply
	if err := res.Bind(&after); err != nil || after.Result == nil || after.Result.Content[0].Text != "[redacted]" {
		t.Fatalf("bind %+v %v", after, err)
	}
	after = hook.AfterReply{}
	if err := (hook.Result{Merged: map[string]any{}}).Bind(&after); err != nil || after.Result != nil {
		t.Fatalf("empty bind %+v %v", after, err)
	}

	for _, merged := range []map[string]any{{"block": "yes"}, {"args": []any{1}}, {"reason": 3}} {
		var br hook.BeforeReply
		if err := (hook.Result{Merged: merged}).Bind(&br); !errors.Is(err, hook.ErrInvalidReply) {
			t.Errorf("%v: bind = %v", merged, err)
		}
	}
}

func TestPayloadJSON(t *testing.T) {
	t.Parallel()
	before := hook.BeforeCall{SessionID: "s", FunctionCallID: "c", FunctionID: "fs::read", Args: map[string]any{"path": "/a"}}
	if got := mustJSON(t, before); got != `{"session_id":"s","function_call_id":"c","function_id":"fs::read","args":{"path":"/a"}}` {
		t.Fatal(got)
	}
	after := hook.AfterCall{SessionID: "s", FunctionCallID: "c", FunctionID: "fs::read", Result: agent.TextResult("ok")}
	if got := mustJSON(t, after); !strings.Contains(got, `"result":{"content":[{"type":"text","text":"ok"}],"is_error":false}`) {
		t.Fatal(got)
	}
	if got := mustJSON(t, hook.BeforeReply{}); got != `{}` {
		t.Fatal(got)
	}
}
