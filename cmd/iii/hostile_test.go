package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// errorLog keeps the error records a node logs.
type errorLog struct {
	mu   sync.Mutex
	recs []string
}

func (l *errorLog) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= slog.LevelError }
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler             { return l }
func (l *errorLog) WithGroup(string) slog.Handler                  { return l }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "stack" {
			b.WriteString(" " + a.String())
		}
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, b.String())
	l.mu.Unlock()
	return nil
}

func (l *errorLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.recs
	l.recs = nil
	return out
}

// startWatchedNode starts a node whose error-level log records are kept,
// and fails the test when anything is printed to the standard library's
// log meanwhile (stderr, outside the node's log: OpenTelemetry's errors
// about malformed headers used to be).
func startWatchedNode(t *testing.T) (*app, *errorLog) {
	t.Helper()
	logs := &errorLog{}
	a := startTestAppWith(t, upConfig{httpAddr: "127.0.0.1:0", logger: slog.New(logs)})
	var stdlog bytes.Buffer
	log.SetOutput(&stdlog)
	t.Cleanup(func() {
		log.SetOutput(os.Stderr)
		if stdlog.Len() > 0 {
			t.Errorf("printed outside the node's log:\n%.500s", stdlog.String())
		}
	})
	return a, logs
}

// garbage is one malformed request body.
type garbage struct {
	name    string
	body    []byte
	msgpack bool
}

func hostileBodies() []garbage {
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	return []garbage{
		{name: "array", body: []byte("[1,2,3]")},
		{name: "string", body: []byte(`"x"`)},
		{name: "number", body: []byte("-1e309")},
		{name: "truncated", body: []byte(`{"session_id":`)},
		{name: "binary", body: []byte("\xff\xfe\x00\x01garbage")},
		{name: "deep", body: []byte(`{"a":` + deep + `}`)},
		{name: "msgpack garbage", body: []byte("\xc1\xc1\xc1"), msgpack: true},
		{name: "msgpack truncated map", body: []byte("\xdf\xff\xff\xff\xff"), msgpack: true},
		{name: "msgpack huge string", body: []byte("\x81\xdb\xff\xff\xff\xf0"), msgpack: true},
	}
}

// wrongTypes is an object with every property the request schema declares
// set to a value of another type (nil when the schema declares no typed
// property).
func wrongTypes(schema json.RawMessage) []byte {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	obj := map[string]any{}
	for name, p := range s.Properties {
		t, _ := p.Type.(string)
		switch t {
		case "string":
			obj[name] = map[string]any{"not": "a string"}
		case "integer", "number":
			obj[name] = "not a number"
		case "boolean":
			obj[name] = []int{1}
		case "object", "array":
			obj[name] = 12.5
		}
	}
	if len(obj) == 0 {
		return nil
	}
	b, _ := json.Marshal(obj)
	return b
}

// largeStrings is an object with every string property the request schema
// declares set to text, n bytes in all (nil when it declares none).
func largeStrings(schema json.RawMessage, n int) []byte {
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	var names []string
	for name, p := range s.Properties {
		if t, _ := p.Type.(string); t == "string" {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	obj := map[string]any{}
	for _, name := range names {
		obj[name] = strings.Repeat("a", n/len(names))
	}
	b, _ := json.Marshal(obj)
	return b
}

// TestEveryFunctionRefusesGarbage sends every function of a whole node's
// live catalog malformed requests, as a foreign NATS client would: each
// answers in time with a coded error (never internal), nothing panics or
// logs an error, no stream is written, and the node runs a turn after. (A JSON null is "no arguments",
// as {} is, and not among them.)
func TestEveryFunctionRefusesGarbage(t *testing.T) {
	a, logs := startWatchedNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fns, err := a.e.FunctionsList(ctx)
	if err != nil || len(fns) < 20 {
		t.Fatalf("catalog: %d functions, %v", len(fns), err)
	}
	nc, err := nats.Connect(a.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ask := func(id string, g garbage) (*nats.Msg, error) {
		subj, err := subjects.FunctionSubject(id)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(subj)
		m.Data = g.body
		if g.msgpack {
			m.Header.Set(wire.HeaderContentType, wire.ContentMsgpack)
		}
		return nc.RequestMsg(m, 20*time.Second)
	}
	js := a.e.JetStream()
	// What the node writes on its own at start (the skills index, …)
	// settles first.
	before := streamHeads(ctx, t, js)
	for settle := time.Now().Add(10 * time.Second); time.Now().Before(settle); {
		time.Sleep(300 * time.Millisecond)
		now := streamHeads(ctx, t, js)
		if maps.Equal(before, now) {
			break
		}
		before = now
	}
	for _, fn := range fns {
		bodies := hostileBodies()
		if b := wrongTypes(fn.RequestSchema); b != nil {
			bodies = append(bodies, garbage{name: "wrong types", body: b})
		}
		for _, g := range bodies {
			reply, err := ask(fn.ID, g)
			if err != nil {
				t.Errorf("%s, %s: no reply: %v", fn.ID, g.name, err)
				continue
			}
			we := wire.Decode(reply)
			switch {
			case we == nil:
				t.Errorf("%s, %s: accepted: %.200s", fn.ID, g.name, reply.Data)
			case we.Code == wire.CodeInternal:
				t.Errorf("%s, %s: internal error: %v", fn.ID, g.name, we)
			}
		}
		for _, rec := range logs.take() {
			t.Errorf("%s: logged: %s", fn.ID, rec)
		}
	}
	after := streamHeads(ctx, t, js)
	if !maps.Equal(before, after) {
		t.Errorf("streams written by refused requests:\n before %v\n after  %v", before, after)
	}
	// Every string property long, 900 KiB in all (under the bus's 1 MiB):
	// answered in time, never an internal error, nothing logged. Such a
	// request may be valid, and then stored. (An error that quoted the
	// input used to make a reply over the max payload, which never left.)
	for _, fn := range fns {
		b := largeStrings(fn.RequestSchema, 900<<10)
		if b == nil {
			continue
		}
		reply, err := ask(fn.ID, garbage{name: "large strings", body: b})
		if err != nil {
			t.Errorf("%s, large strings: no reply: %v", fn.ID, err)
			continue
		}
		if we := wire.Decode(reply); we != nil && we.Code == wire.CodeInternal {
			t.Errorf("%s, large strings: internal error: %v", fn.ID, we)
		}
		for _, rec := range logs.take() {
			t.Errorf("%s, large strings: logged: %s", fn.ID, rec)
		}
	}
	// Hostile headers on an empty object: a time budget that is not a
	// number, negative or huge; trace context and baggage that are not
	// W3C; a msgpack content type on JSON. Answered in time, never an
	// internal error, nothing logged. ({} may be a valid request.)
	headers := []map[string]string{
		{"Iii-Timeout-Ms": "abc"},
		{"Iii-Timeout-Ms": "-5"},
		{"Iii-Timeout-Ms": "99999999999999999999999"},
		{"traceparent": "00-zz-yy-01", "tracestate": strings.Repeat("x=", 500), "baggage": strings.Repeat("k=%ZZ,", 1000)},
		{wire.HeaderContentType: "application/msgpack; charset=latin1"},
	}
	for _, fn := range fns {
		for _, h := range headers {
			subj, err := subjects.FunctionSubject(fn.ID)
			if err != nil {
				t.Fatal(err)
			}
			m := nats.NewMsg(subj)
			m.Data = []byte("{}")
			for k, v := range h {
				m.Header.Set(k, v)
			}
			reply, err := nc.RequestMsg(m, 20*time.Second)
			if err != nil {
				t.Errorf("%s, headers %v: no reply: %v", fn.ID, h, err)
				continue
			}
			if we := wire.Decode(reply); we != nil && we.Code == wire.CodeInternal {
				t.Errorf("%s, headers %.80v: internal error: %v", fn.ID, h, we)
			}
		}
		for _, rec := range logs.take() {
			t.Errorf("%s, hostile headers: logged: %s", fn.ID, rec)
		}
	}
	// The node still runs a turn with a function call.
	out, err := runIII(t, "chat", "--nats", a.url, "-m", `/call state::get {"scope":"demo","key":"k"}`)
	if err != nil || !strings.Contains(out, "function state::get returned") {
		t.Fatalf("chat after the garbage: %v\n%s", err, out)
	}
}

// streamHeads is every stream's last sequence but the trace store's (the
// spans of every call are stored, refused ones too).
func streamHeads(ctx context.Context, t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	heads := map[string]uint64{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if name == subjects.SpanStream {
			continue
		}
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		heads[name] = s.CachedInfo().State.LastSeq
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return heads
}
