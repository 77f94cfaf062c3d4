package state_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/state"
	"github.com/iii-on-nats/iii/engine/wire"
)

func serve(t testing.TB, v *env) {
	t.Helper()
	w, err := state.Serve(context.Background(), v.e, v.store)
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
}

// jsonReq is what `nats req iii.fn.state.set '{...}'` sends: JSON, no
// Content-Type.
func jsonReq(t testing.TB, nc *nats.Conn, subj, body string) (string, *wire.Error) {
	t.Helper()
	reply, err := nc.Request(subj, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subj, err)
	}
	if werr := wire.Decode(reply); werr != nil {
		return "", werr
	}
	if ct := reply.Header.Get(wire.HeaderContentType); ct != wire.ContentJSON {
		t.Fatalf("reply content type %q", ct)
	}
	return string(reply.Data), nil
}

func TestFunctionsJSON(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)

	steps := []struct{ subj, body, want string }{
		{"iii.fn.state.get", `{"scope":"sessions","key":"abc"}`, `{"value":null,"revision":0}`},
		{"iii.fn.state.set", `{"scope":"sessions","key":"abc","value":{"n":1}}`, `{"old_value":null,"new_value":{"n":1}}`},
		{"iii.fn.state.get", `{"scope":"sessions","key":"abc"}`, `{"value":{"n":1},"revision":1}`},
		{"iii.fn.state.update", `{"scope":"sessions","key":"abc","ops":[{"type":"increment","path":"n","by":2},{"type":"append","path":"l","value":"x"}]}`,
			`{"old_value":{"n":1},"new_value":{"l":["x"],"n":3}}`},
		{"iii.fn.state.update", `{"scope":"sessions","key":"abc","ops":[{"type":"remove","path":"l"},{"type":"merge","value":{"m":true}}]}`,
			`{"old_value":{"l":["x"],"n":3},"new_value":{"m":true,"n":3}}`},
		{"iii.fn.state.set", `{"scope":"sessions","key":"x/y","value":null}`, `{"old_value":null,"new_value":null}`},
		{"iii.fn.state.list", `{"scope":"sessions"}`, `{"items":[{"key":"abc","value":{"m":true,"n":3},"revision":3},{"key":"x/y","value":null,"revision":4}]}`},
		{"iii.fn.state.list", `{"scope":"sessions","prefix":"x"}`, `{"items":[{"key":"x/y","value":null,"revision":4}]}`},
		{"iii.fn.state.list", `{"scope":"sessions","limit":1}`, `{"items":[{"key":"abc","value":{"m":true,"n":3},"revision":3}],"truncated":true}`},
		{"iii.fn.state.list", `{"scope":"sessions","after":"abc"}`, `{"items":[{"key":"x/y","value":null,"revision":4}]}`},
		{"iii.fn.state.delete", `{"scope":"sessions","key":"abc"}`, `{"old_value":{"m":true,"n":3}}`},
		{"iii.fn.state.delete", `{"scope":"sessions","key":"abc"}`, `{"old_value":null}`},
		{"iii.fn.state.get", `{"scope":"sessions","key":"abc"}`, `{"value":null,"revision":0}`},
		{"iii.fn.state.list", `{"scope":"none"}`, `{"items":[]}`},
	}
	for i, st := range steps {
		got, werr := jsonReq(t, nc, st.subj, st.body)
		if werr != nil {
			t.Fatalf("step %d %s: %v", i, st.subj, werr)
		}
		if got != st.want {
			t.Fatalf("step %d %s %s\n got %s\nwant %s", i, st.subj, st.body, got, st.want)
		}
	}
}

func TestFunctionsMsgpack(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	serve(t, v)
	// A second engine: the caller is another process.
	e := enginetest.NewEngine(t, v.ns)
	ctx := testCtx(t)

	get, err := engine.Call[state.GetResponse](ctx, e, state.FnGet, map[string]any{"scope": "s", "key": "k"})
	if err != nil || get.Value != nil || get.Revision != 0 {
		t.Fatalf("get missing = %+v, %v", get, err)
	}
	set, err := engine.Call[state.ChangeResponse](ctx, e, state.FnSet, map[string]any{"scope": "s", "key": "k", "value": map[string]any{"n": 1, "f": 1.5}})
	if err != nil || set.OldValue != nil || toJSON(t, set.NewValue) != `{"f":1.5,"n":1}` {
		t.Fatalf("set = %+v, %v", set, err)
	}
	upd, err := engine.Call[state.ChangeResponse](ctx, e, state.FnUpdate, map[string]any{
		"scope": "s", "key": "k",
		"ops": []state.Op{state.Increment("n", 41), state.Set("tags", []string{"a"})},
	})
	if err != nil || toJSON(t, upd.OldValue) != `{"f":1.5,"n":1}` || toJSON(t, upd.NewValue) != `{"f":1.5,"n":42,"tags":["a"]}` {
		t.Fatalf("update = %+v, %v", upd, err)
	}
	// Msgpack replies carry integral numbers as integers.
	if n := upd.NewValue.(map[string]any)["n"]; n != int8(42) {
		t.Fatalf("n = %T %v, want a msgpack integer", n, n)
	}
	get, err = engine.Call[state.GetResponse](ctx, e, state.FnGet, map[string]any{"scope": "s", "key": "k"})
	if err != nil || get.Revision != 2 || toJSON(t, get.Value) != `{"f":1.5,"n":42,"tags":["a"]}` {
		t.Fatalf("get = %+v, %v", get, err)
	}
	list, err := engine.Call[state.ListResponse](ctx, e, state.FnList, map[string]any{"scope": "s", "prefix": ""})
	if err != nil || len(list.Items) != 1 || list.Items[0].Key != "k" || list.Items[0].Revision != 2 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	del, err := engine.Call[state.DeleteResponse](ctx, e, state.FnDelete, map[string]any{"scope": "s", "key": "k"})
	if err != nil || toJSON(t, del.OldValue) != `{"f":1.5,"n":42,"tags":["a"]}` {
		t.Fatalf("delete = %+v, %v", del, err)
	}
	// The Go API sees what the functions wrote.
	if _, _, err := v.store.Get(ctx, "s", "k"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("Get after delete = %v", err)
	}
	// Coded errors come back through msgpack too.
	err = e.Trigger(ctx, state.FnSet, map[string]any{"scope": "a.b", "key": "k", "value": 1}, nil)
	if !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("bad scope over msgpack = %v", err)
	}
}

func TestFunctionsBadInput(t *testing.T) {
	t.Parallel()
	v := newEnv(t, []enginetest.ServerOption{enginetest.WithMaxPayload(64 << 10)})
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)
	if _, werr := jsonReq(t, nc, "iii.fn.state.set", `{"scope":"ok","key":"k","value":{"s":"x","n":1}}`); werr != nil {
		t.Fatal(werr)
	}
	big := strings.Repeat("x", v.store.MaxValueSize()+1)
	tests := []struct{ name, subj, body string }{
		{"wildcard scope", "iii.fn.state.set", `{"scope":"a*","key":"k","value":1}`},
		{"gt scope", "iii.fn.state.set", `{"scope":">","key":"k","value":1}`},
		{"dot in scope", "iii.fn.state.set", `{"scope":"a.b","key":"k","value":1}`},
		{"space in scope", "iii.fn.state.set", `{"scope":"a b","key":"k","value":1}`},
		{"empty scope", "iii.fn.state.set", `{"scope":"","key":"k","value":1}`},
		{"missing scope", "iii.fn.state.set", `{"key":"k","value":1}`},
		{"empty key", "iii.fn.state.set", `{"scope":"ok","key":"","value":1}`},
		{"empty key segment", "iii.fn.state.set", `{"scope":"ok","key":"a//b","value":1}`},
		{"trailing slash key", "iii.fn.state.delete", `{"scope":"ok","key":"a/"}`},
		{"missing value", "iii.fn.state.set", `{"scope":"ok","key":"k"}`},
		{"scope not a string", "iii.fn.state.set", `{"scope":5,"key":"k","value":1}`},
		{"key not a string", "iii.fn.state.get", `{"scope":"ok","key":["k"]}`},
		{"unknown field", "iii.fn.state.get", `{"scope":"ok","key":"k","vaule":1}`},
		{"not an object", "iii.fn.state.get", `[1,2]`},
		{"not JSON", "iii.fn.state.get", `{scope:`},
		{"oversized value", "iii.fn.state.set", `{"scope":"ok","key":"k","value":"` + big + `"}`},
		{"ops missing", "iii.fn.state.update", `{"scope":"ok","key":"k"}`},
		{"ops not array", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":"x"}`},
		{"ops empty", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[]}`},
		{"op not object", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[1]}`},
		{"op unknown type", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"multiply","path":"n"}]}`},
		{"op type not string", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":1}]}`},
		{"op path not string", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"set","path":1,"value":1}]}`},
		{"op by not number", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"increment","path":"n","by":"2"}]}`},
		{"op unknown field", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"set","path":"n","val":1}]}`},
		{"op empty path segment", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"set","path":"a..b","value":1}]}`},
		{"increment a string", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"increment","path":"s"}]}`},
		{"append to number", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"append","path":"n","value":1}]}`},
		{"second op fails", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"set","path":"z","value":1},{"type":"merge","path":"s","value":{}}]}`},
		{"oversized update", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"set","path":"z","value":"` + big + `"}]}`},
		{"value past float64", "iii.fn.state.set", `{"scope":"ok","key":"k","value":{"n":1e400}}`},
		{"by past float64", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"increment","path":"n","by":-1e400}]}`},
		{"increment overflow", "iii.fn.state.update", `{"scope":"ok","key":"k","ops":[{"type":"increment","path":"n","by":18446744073709551615}]}`},
		{"trailing data", "iii.fn.state.get", `{"scope":"ok","key":"k"} {}`},
		{"list bad scope", "iii.fn.state.list", `{"scope":"a.b"}`},
		{"list bad prefix", "iii.fn.state.list", `{"scope":"ok","prefix":"a//b"}`},
		{"list bad limit", "iii.fn.state.list", `{"scope":"ok","limit":-1}`},
		{"list fractional limit", "iii.fn.state.list", `{"scope":"ok","limit":1.5}`},
	}
	before := v.msgs(t)
	for _, tt := range tests {
		_, werr := jsonReq(t, nc, tt.subj, tt.body)
		if werr == nil || werr.Code != wire.CodeInvalidPayload {
			t.Errorf("%s: error %v, want invalid_payload", tt.name, werr)
		}
	}
	if after := v.msgs(t); after != before {
		t.Fatalf("bad input wrote %d messages", after-before)
	}
	got, werr := jsonReq(t, nc, "iii.fn.state.get", `{"scope":"ok","key":"k"}`)
	if werr != nil || got != `{"value":{"n":1,"s":"x"},"revision":1}` {
		t.Fatalf("value after bad input = %s, %v", got, werr)
	}
}

// TestFunctionsCatalog checks that every function publishes a description
// and valid JSON Schemas in its endpoint metadata.
func TestFunctionsCatalog(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	serve(t, v)
	infos, err := v.e.Discover(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, in := range infos {
		if in.Name != state.WorkerName {
			continue
		}
		for _, ep := range in.Endpoints {
			id := ep.Metadata[engine.MetaFunctionID]
			seen[id] = true
			if ep.Metadata[engine.MetaDescription] == "" {
				t.Errorf("%s: no description", id)
			}
			for _, k := range []string{engine.MetaRequestSchema, engine.MetaResponseSchema} {
				var schema map[string]any
				if err := json.Unmarshal([]byte(ep.Metadata[k]), &schema); err != nil || schema["type"] != "object" {
					t.Errorf("%s: %s is not a JSON Schema object: %v", id, k, err)
				}
			}
		}
	}
	for _, id := range []string{state.FnGet, state.FnSet, state.FnUpdate, state.FnDelete, state.FnList} {
		if !seen[id] {
			t.Errorf("%s not in the catalog", id)
		}
	}
}

// TestFunctionsListPaging: a list past the max payload pages, and every
// page moves forward, even past a foreign value (300 KiB of control bytes,
// six times that as a JSON string) too large for a message alone, which
// comes without its value.
func TestFunctionsListPaging(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)
	ctx := testCtx(t)
	big := strings.Repeat("x", v.store.MaxValueSize()-2)
	for _, k := range []string{"a", "c1", "c2", "c3"} {
		val := any(big)
		if k == "a" {
			val = 1
		}
		if _, _, err := v.store.Set(ctx, "s", k, val); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.store.KeyValue().Put(ctx, "s.b", bytes.Repeat([]byte{1}, 300<<10)); err != nil {
		t.Fatal(err)
	}
	var keys []string
	after := ""
	for page := 0; ; page++ {
		if page == 10 {
			t.Fatalf("no end after %d pages; keys %v", page, keys)
		}
		body, _ := json.Marshal(map[string]any{"scope": "s", "after": after})
		got, werr := jsonReq(t, nc, "iii.fn.state.list", string(body))
		if werr != nil {
			t.Fatalf("page %d: %v", page, werr)
		}
		var resp state.ListResponse
		if err := json.Unmarshal([]byte(got), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Truncated && len(resp.Items) == 0 {
			t.Fatalf("page %d after %q: truncated and empty: the pager is stuck", page, after)
		}
		for _, it := range resp.Items {
			keys = append(keys, it.Key)
			if want := it.Key == "b"; it.ValueUnavailable != want || (want && it.Value != nil) {
				t.Errorf("item %q: value_unavailable %v, value %.20v", it.Key, it.ValueUnavailable, it.Value)
			}
		}
		if !resp.Truncated {
			break
		}
		after = resp.Items[len(resp.Items)-1].Key
	}
	if got, want := strings.Join(keys, ","), "a,b,c1,c2,c3"; got != want {
		t.Fatalf("keys %s, want %s", got, want)
	}
}

// TestFunctionsValueFitsBothCodecs: a stored value's every answer fits
// in one message in both codecs. A float takes 9 bytes in msgpack and as
// few as 4 in a JSON array, so a value well under the JSON limit was
// stored, by a JSON caller or a Go one, and then answered internal (over
// the max payload) to every msgpack caller's get.
func TestFunctionsValueFitsBothCodecs(t *testing.T) {
	t.Parallel()
	v := newEnv(t, []enginetest.ServerOption{enginetest.WithMaxPayload(64 << 10)})
	serve(t, v)
	e := enginetest.NewEngine(t, v.ns) // msgpack, as Go callers are
	nc := enginetest.Connect(t, v.ns)  // JSON
	ctx := testCtx(t)
	floats := func(n int) []any {
		s := make([]any, n)
		for i := range s {
			s[i] = 0.1
		}
		return s
	}
	// JSON "0.1," is 4 bytes an element, msgpack 9.
	tooMany := (v.store.MaxValueSize() - 1) / 4
	if b, _ := json.Marshal(floats(tooMany)); len(b) > v.store.MaxValueSize() {
		t.Fatalf("test value's JSON is %d bytes, over the limit", len(b))
	}
	before := v.msgs(t)
	if _, _, err := v.store.Set(ctx, "s", "f", floats(tooMany)); !errors.Is(err, state.ErrValueTooLarge) {
		t.Fatalf("Store.Set of %d floats = %v, want ErrValueTooLarge", tooMany, err)
	}
	if _, err := jsonReq(t, nc, "iii.fn.state.set", toJSON(t, map[string]any{"scope": "s", "key": "f", "value": floats(tooMany)})); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("JSON set of %d floats = %v, want invalid_payload", tooMany, err)
	}
	if _, _, err := v.store.Update(ctx, "s", "f", []state.Op{state.Set("", floats(tooMany))}); !errors.Is(err, state.ErrValueTooLarge) {
		t.Fatalf("Store.Update to %d floats = %v, want ErrValueTooLarge", tooMany, err)
	}
	if after := v.msgs(t); after != before {
		t.Fatalf("refused values wrote %d messages", after-before)
	}
	// As many as fit: set, updated, read in both codecs.
	fit := (v.store.MaxValueSize() - 3) / 9
	set, err := engine.Call[state.ChangeResponse](ctx, e, state.FnSet, map[string]any{"scope": "s", "key": "f", "value": floats(fit - 1)})
	if err != nil || len(set.NewValue.([]any)) != fit-1 {
		t.Fatalf("msgpack set of %d floats = %v", fit-1, err)
	}
	upd, err := engine.Call[state.ChangeResponse](ctx, e, state.FnUpdate, map[string]any{"scope": "s", "key": "f",
		"ops": []state.Op{state.Append("", 0.1)}})
	if err != nil || len(upd.OldValue.([]any)) != fit-1 || len(upd.NewValue.([]any)) != fit {
		t.Fatalf("msgpack update to %d floats = %v", fit, err)
	}
	get, err := engine.Call[state.GetResponse](ctx, e, state.FnGet, map[string]any{"scope": "s", "key": "f"})
	if err != nil || len(get.Value.([]any)) != fit {
		t.Fatalf("msgpack get = %v", err)
	}
	if _, err := jsonReq(t, nc, "iii.fn.state.get", `{"scope":"s","key":"f"}`); err != nil {
		t.Fatalf("JSON get = %v", err)
	}
	if _, err := engine.Call[state.ChangeResponse](ctx, e, state.FnUpdate, map[string]any{"scope": "s", "key": "f",
		"ops": []state.Op{state.Append("", 0.1)}}); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Fatalf("msgpack update past the limit = %v, want invalid_payload", err)
	}
}
