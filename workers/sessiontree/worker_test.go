package sessiontree_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// callJSON calls fn over the bus with a JSON body, as the nats CLI does.
func callJSON(t *testing.T, f *fixture, fn, body string) (map[string]any, error) {
	t.Helper()
	out, _, err := f.e.TriggerRaw(ctxT(t), fn, []byte(body), wire.JSON)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s answered %q: %v", fn, out, err)
	}
	return m, nil
}

func TestFunctionsOverTheBus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r, err := callJSON(t, f, sessiontree.CreateFunction, `{"display_name":"cli"}`)
	if err != nil {
		t.Fatal(err)
	}
	sid := r["session_id"].(string)
	// An id that exists is a conflict no retry can win: not retryable.
	_, err = callJSON(t, f, sessiontree.CreateFunction, `{"session_id":"`+sid+`"}`)
	if we := wire.From(err); !errors.Is(err, wire.ErrConflict) || we.Retryable {
		t.Fatalf("create an existing session = %+v, want conflict, not retryable", we)
	}
	r, err = callJSON(t, f, sessiontree.AppendFunction, `{"session_id":"`+sid+`","message":{"role":"user","content":[{"type":"text","text":"hi"}]}}`)
	if err != nil {
		t.Fatal(err)
	}
	first := r["entry_id"].(string)
	r, err = callJSON(t, f, sessiontree.AppendBatchFunction, `{"session_id":"`+sid+`","entries":[`+
		`{"type":"message","message":{"role":"assistant","content":[{"type":"text","text":"hello"}],"stop_reason":"end"}},`+
		`{"type":"custom","custom_type":"ui.note","data":{"pinned":true}}]}`)
	if err != nil || len(r["entry_ids"].([]any)) != 2 {
		t.Fatalf("append_batch = %v, %v", r, err)
	}
	r, err = callJSON(t, f, sessiontree.MessagesFunction, `{"session_id":"`+sid+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	if msgs := r["messages"].([]any); len(msgs) != 2 || len(r["path"].([]any)) != 3 {
		t.Fatalf("messages = %v", r)
	}
	r, err = callJSON(t, f, sessiontree.ForkFunction, `{"session_id":"`+sid+`","from_entry_id":"`+first+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	fork := r["session_id"].(string)
	for _, fn := range []string{sessiontree.GetFunction, sessiontree.TreeFunction, sessiontree.EntriesFunction, sessiontree.ExportHTMLFunction} {
		if _, err := callJSON(t, f, fn, `{"session_id":"`+fork+`"}`); err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
	}
	if _, err := callJSON(t, f, sessiontree.CloneFunction, `{"session_id":"`+sid+`"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := callJSON(t, f, sessiontree.SetActiveLeafFunction, `{"session_id":"`+sid+`","entry_id":"`+first+`"}`); err != nil {
		t.Fatal(err)
	}
	if r, err = callJSON(t, f, sessiontree.EnsureFunction, `{"session_id":"`+sid+`"}`); err != nil || r["created"] != false {
		t.Fatalf("ensure = %v, %v", r, err)
	}
	if r, err = callJSON(t, f, sessiontree.ListFunction, ``); err != nil || len(r["sessions"].([]any)) != 3 {
		t.Fatalf("list = %v, %v", r, err)
	}

	// Coded errors travel.
	_, err = callJSON(t, f, sessiontree.MessagesFunction, `{"session_id":"nobody"}`)
	wantCode(t, err, wire.CodeNotFound)
	_, err = callJSON(t, f, sessiontree.AppendFunction, `{"session_id":"`+sid+`","parent_id":"e999999","message":{"role":"user","content":[{"type":"text","text":"x"}]}}`)
	wantCode(t, err, wire.CodeNotFound)
	_, err = callJSON(t, f, sessiontree.AppendFunction, `{"session_id":"`+sid+`","message":{"role":"user"}}`)
	wantCode(t, err, wire.CodeInvalidPayload)
	_, err = callJSON(t, f, sessiontree.AppendFunction, `not json`)
	wantCode(t, err, wire.CodeInvalidPayload)

	// The msgpack codec of Go callers.
	msgs, err := engine.Call[sessiontree.MessagesResponse](ctxT(t), f.e, sessiontree.MessagesFunction, sessiontree.ReadRequest{SessionID: fork})
	if err != nil || len(msgs.Messages) != 1 || msgs.Messages[0].Message.Content[0].Text != "hi" {
		t.Fatalf("fork messages = %+v, %v", msgs, err)
	}
}

func TestSkillsPublished(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kv, err := f.e.JetStream().KeyValue(ctxT(t), subjects.SkillsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range f.s.Functions() {
		key, err := subjects.SkillKey(sessiontree.WorkerName, fn.ID)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctxT(t), key)
		if err != nil || !strings.HasPrefix(string(e.Value()), "---\ntitle: ") || !strings.Contains(string(e.Value()), "# "+fn.ID) {
			t.Errorf("skill of %s: %v", fn.ID, err)
		}
		if !json.Valid([]byte(fn.RequestSchema)) || !json.Valid([]byte(fn.ResponseSchema)) {
			t.Errorf("%s: schema is not JSON", fn.ID)
		}
	}
}

func TestWorkerLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if err := f.w.Start(context.Background(), f.e); !errors.Is(err, sessiontree.ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}
	m, err := workers.Global().Module(sessiontree.WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	w := m.New().(*sessiontree.Worker)
	env := workers.Env{Settings: map[string]map[string]string{"session": {"max_entry_size": "65536", "meta_delay": "50ms"}}}
	if err := w.Provision(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{{"max_entry_size": "lots"}, {"max_entry_size": "10"}, {"colour": "blue"},
		{"meta_delay": "soon"}, {"meta_delay": "-1s"}, {"meta_delay": "1m"}} {
		env := workers.Env{Settings: map[string]map[string]string{"session": bad}}
		if err := sessiontree.NewWorker().Provision(context.Background(), env); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("Provision(%v) = %v", bad, err)
		}
	}
	if err := f.w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.e.TriggerRaw(ctxT(t), sessiontree.ListFunction, []byte(`{}`), wire.JSON); !errors.Is(err, wire.ErrFunctionNotFound) {
		t.Fatalf("list after Close = %v", err)
	}
	if err := f.w.Start(context.Background(), f.e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	for _, opt := range []sessiontree.Option{sessiontree.WithClock(nil), sessiontree.WithLogger(nil), sessiontree.WithMaxEntrySize(2 << 20), sessiontree.WithTimeout(0)} {
		if _, err := sessiontree.Open(context.Background(), f.e, opt); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("Open with a bad option = %v", err)
		}
	}
}
