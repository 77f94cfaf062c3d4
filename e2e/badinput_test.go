package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/services"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/std"
)

// badCallTimeout is how long one bad call may take: a function that does
// not answer bad input within it fails the sweep (as a timeout).
const badCallTimeout = 4 * time.Second

// badMarker is in every bad id, so that the persistence check finds any
// key, subject or record a bad call left behind, escaped or not.
const badMarker = "zqbad"

// badIDs are ids no function may take where it wants an id: each would
// name a wildcard, a second subject token or no token at all, or is far
// longer than any id (subjects.MaxIDLen).
var badIDs = []struct{ name, id string }{
	{"star", badMarker + "*1"},
	{"gt", badMarker + ">"},
	{"dots", badMarker + ".x.y"},
	{"space", badMarker + " 1"},
	{"huge", badMarker + strings.Repeat("x", 16<<10)},
}

// sweepExcluded are the catalog's functions a bad-input call means
// nothing for, with the reason. Empty: every function is swept; add an
// entry only with a reason that holds.
var sweepExcluded = map[string]string{}

// noArgs are the payloads that are all the empty request: the empty
// body (the JSON codec reads it as {}, PROTOCOL §1), {}, and null, which
// decodes into a request as {} does (the engine reads a null value as the
// empty object, as engine/queue's Payload does).
var noArgs = []string{"empty", "{}", "{} (msgpack)", "null", "null (msgpack)"}

// validPayloads lists, per function, the payloads of the sweep that are
// valid by the function's documented contract, so a success is correct;
// any other success fails the sweep. stores names the stream a success
// writes to ("" for none): it may grow by one message per such success.
var validPayloads = map[string]struct {
	payloads []string
	stores   string
	reason   string
}{
	"approval::list_pending":     {noArgs, "", "session_id is optional: without one it lists every session's pending calls"},
	"auth::list_providers":       {noArgs, "", "takes no arguments"},
	"auth::status":               {noArgs, "", "provider is optional: without one it describes every provider"},
	"budget::list":               {noArgs, "", "every field is optional (after: a page cursor)"},
	"budget::usage":              {noArgs, "", "every field is optional: without one it reports every budget"},
	"cron::list":                 {noArgs, "", "every field is optional (after, limit: a page cursor and size)"},
	"directory::skills::index":   {noArgs, "", "takes no arguments"},
	"directory::skills::list":    {noArgs, "", "worker and type are optional filters"},
	"engine::functions::list":    {noArgs, "", "takes no arguments (SPEC §1: engine::functions::list {})"},
	"engine::workers::list":      {noArgs, "", "takes no arguments (SPEC §1: engine::workers::list {})"},
	"http::list_routes":          {noArgs, "", "every field is optional (after: a page cursor)"},
	"models::list":               {noArgs, "", "provider and capability are optional filters (SPEC §4)"},
	"policy::reload":             {noArgs, "", "takes no arguments (PROTOCOL §9: policy::reload {})"},
	"policy::status":             {noArgs, "", "takes no arguments (PROTOCOL §9: policy::status {})"},
	"provider::scripted::models": {noArgs, "", "takes no arguments (what models::reconcile asks)"},
	"sandbox::list":              {noArgs, "", "session_id is optional: without one it lists every sandbox"},
	"session::list":              {noArgs, "", "limit and cursor are optional paging fields"},
	"session::create":            {noArgs, "KV_" + subjects.SessionsBucket, "display_name is optional (SPEC §4: session::create {display_name?}); each call creates one session"},
	"policy::check_permissions": {noArgs, "", "an invalid or missing function_id is no payload error but a deny with rule_id " +
		"invalid_function_id (workers/policy CheckRequest): the gate fails closed rather than erroring"},
	"hooks::publish_collect": {[]string{"topic star", "topic star (msgpack)", "topic gt", "topic gt (msgpack)", "topic dots", "topic dots (msgpack)"}, "",
		"a hook topic is a function-id-like name whose '*', '>' and '.' are escaped into one subject token (subjects.HookSubject); nobody subscribes, so it answers no replies at once"},
}

// idField says whether the sweep gives the request field bad ids: the
// fields that become a subject or key token. function_id, model_id and
// dedup_id are not (a function id may contain any non-space character,
// escaped; a model id is a free-form name looked up in the catalog; a
// dedup id is a header value of any non-space characters).
func idField(name string) bool {
	switch name {
	case "function_id", "model_id", "dedup_id":
		return false
	case "id", "session_id", "leaf", "scope", "queue", "topic", "channel":
		return true
	}
	return strings.HasSuffix(name, "_id")
}

// schema is the part of a function's request JSON Schema the sweep reads.
type schema struct {
	Type       json.RawMessage    `json:"type"`
	Enum       []any              `json:"enum"`
	Properties map[string]*schema `json:"properties"`
	Required   []string           `json:"required"`
}

// firstType is the schema's type, or the first of its types.
func (s *schema) firstType() string {
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return one
	}
	var many []string
	if json.Unmarshal(s.Type, &many) == nil && len(many) > 0 {
		return many[0]
	}
	return ""
}

// goodValues are plausible values of well-known fields, so that a payload
// with one bad id is otherwise valid and reaches the id's validation.
var goodValues = map[string]any{
	"provider":    "scripted",
	"model":       "echo",
	"messages":    []agent.Message{userText("hi")},
	"expression":  "0 * * * *",
	"method":      "GET",
	"path":        "/badinput",
	"decision":    "deny",
	"ceiling_usd": 1,
	"period":      "day",
	"command":     "true",
	// sessiontree's entry id form ("e" and a base-36 sequence).
	"entry_id":      "e1",
	"from_entry_id": "e1",
}

// plausible is a value of the property's type.
func plausible(name string, s *schema) any {
	if v, ok := goodValues[name]; ok {
		return v
	}
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	switch s.firstType() {
	case "integer", "number":
		return 1
	case "boolean":
		return false
	case "array":
		return []any{}
	case "object":
		return map[string]any{}
	}
	return "badinput-ok"
}

// wrongTyped is a value of another type than the property's, or nil when
// the property's type is not known.
func wrongTyped(s *schema) any {
	switch s.firstType() {
	case "string":
		return 42
	case "integer", "number", "boolean", "array", "object":
		return "not-a-" + s.firstType()
	}
	if len(s.Enum) > 0 {
		return 42
	}
	return nil
}

// badPayload is one bad request body. A probe is a value of the right
// type that a function may take or refuse by its contract (a negative or
// huge number, a null element): it must get an answer, and not internal,
// but a success and what it stores are the function's to decide.
type badPayload struct {
	name  string
	codec wire.Codec
	body  []byte
	probe bool
}

// badPayloads builds the table of bad payloads for fn: the generic ones in
// both codecs, then those its request schema allows: each field
// wrong-typed, each number field negative and huge, each array field with
// a null element, each id field given each bad id, the other required
// fields plausible.
func badPayloads(t *testing.T, fn engine.FunctionInfo, big bigBodies) []badPayload {
	t.Helper()
	var out []badPayload
	add := func(name string, v any, probe bool) {
		t.Helper()
		for _, c := range []wire.Codec{wire.JSON, wire.Msgpack} {
			b, err := c.Marshal(v)
			if err != nil {
				t.Fatalf("%s %s: %v", fn.ID, name, err)
			}
			if c == wire.Msgpack {
				name += " (msgpack)"
			}
			out = append(out, badPayload{name, c, b, probe})
		}
	}
	raw := func(name string, c wire.Codec, body []byte) {
		out = append(out, badPayload{name, c, body, false})
	}
	raw("empty", wire.JSON, nil)
	add("null", nil, false)
	add("array", []any{}, false)
	add("string", "str", false)
	add("number", 42, false)
	add("{}", map[string]any{}, false)
	raw("not JSON", wire.JSON, []byte{0xff, 0xfe})
	raw("not msgpack", wire.Msgpack, []byte{0xc1, 0xff, 0xfe})
	raw("near max string", wire.JSON, big.nearMax)
	raw("oversized", wire.JSON, big.oversized)

	var s schema
	if len(fn.RequestSchema) > 0 {
		if err := json.Unmarshal(fn.RequestSchema, &s); err != nil {
			t.Fatalf("%s: request schema: %v", fn.ID, err)
		}
	}
	// with is a plausible request with field set to v.
	with := func(field string, v any) map[string]any {
		req := map[string]any{}
		for _, name := range s.Required {
			if p := s.Properties[name]; p != nil {
				req[name] = plausible(name, p)
			}
		}
		req[field] = v
		return req
	}
	fields := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		fields = append(fields, name)
	}
	sort.Strings(fields)
	if len(fn.RequestSchema) == 0 {
		// No schema: the functions SPEC §4 lists without one all take a
		// session_id.
		fields = []string{"session_id"}
		s.Properties = map[string]*schema{"session_id": {Type: json.RawMessage(`"string"`)}}
	}
	for _, field := range fields {
		p := s.Properties[field]
		if v := wrongTyped(p); v != nil {
			add(field+" wrong type", with(field, v), false)
		}
		switch p.firstType() {
		case "integer", "number":
			add(field+" negative", with(field, -1), true)
			add(field+" huge", with(field, int64(1)<<62), true)
		case "array":
			add(field+" null element", with(field, []any{nil}), true)
		case "string":
			if idField(field) {
				for _, bad := range badIDs {
					add(field+" "+bad.name, with(field, bad.id), false)
				}
			}
		}
	}
	return out
}

// bigBodies are the large bad payloads, built once and shared (read
// only) by every function's table.
type bigBodies struct {
	// nearMax fits the server's max payload, so the handler gets it, but
	// is no object.
	nearMax []byte
	// oversized is over the max payload: the caller refuses it before it
	// is sent (PROTOCOL §1) and gets the code, not a timeout.
	oversized []byte
}

func newBigBodies(maxPayload int) bigBodies {
	return bigBodies{
		nearMax:   []byte(`"` + strings.Repeat("x", maxPayload-8<<10) + `"`),
		oversized: []byte(`{"pad":"` + strings.Repeat("x", maxPayload) + `"}`),
	}
}

// outcome is what one bad call answered.
type outcome struct {
	p     badPayload
	reply any // the decoded reply of a success
	err   error
	took  time.Duration
}

// startUpNode starts on ns what `iii up` starts on one node (cmd/iii
// startApp and startServices): the catalog, the engine's services
// (engine/services, the same call as cmd/iii's, with the HTTP route
// functions) and every module of std.Default, each on its own connection
// with local calls on.
func startUpNode(t *testing.T, ns *server.Server) {
	t.Helper()
	startUp(t, ns, enginetest.NodeHome(t), nil)
}

// upNode is one node started by [startUp]: its close stops it as a
// stopping `iii up` does, and another startUp on the same home and server
// is the node started again.
type upNode struct {
	e       *engine.Engine
	home    string
	svc     *services.Running
	run     *workers.Running
	engines []*engine.Engine // the modules' and the node's, each on its own connection
}

// startUp starts a node (see [startUpNode]) on ns with home; logger, when
// not nil, is the node's. The node is closed when the test ends.
func startUp(t *testing.T, ns *server.Server, home string, logger *slog.Logger) *upNode {
	t.Helper()
	ctx := context.Background()
	n := &upNode{home: home}
	opts := []engine.Option{engine.WithLocalCalls(true)}
	if logger != nil {
		opts = append(opts, engine.WithLogger(logger))
	}
	fail := func(err error) {
		t.Helper()
		_ = n.close(ctx)
		t.Fatal(err)
	}
	n.e = enginetest.NewEngine(t, ns, opts...)
	n.engines = append(n.engines, n.e)
	if _, err := n.e.ServeCatalog(); err != nil {
		fail(err)
	}
	var err error
	if n.svc, err = services.Start(ctx, n.e, services.WithGateway()); err != nil {
		fail(err)
	}
	env := workers.Env{Home: home, Logger: logger, Engine: func(context.Context, string) (*engine.Engine, error) {
		e := enginetest.NewEngine(t, ns, opts...)
		n.engines = append(n.engines, e)
		return e, nil
	}}
	if n.run, err = workers.Global().Start(ctx, n.e, env, std.Default...); err != nil {
		fail(err)
	}
	// Registered last, so it runs before the engines' own clean-ups.
	t.Cleanup(func() { _ = n.close(context.Background()) })
	return n
}

// close stops the node in reverse start order: the modules, the
// services, then every engine and its connection.
func (n *upNode) close(ctx context.Context) error {
	var errs []error
	if n.run != nil {
		errs = append(errs, n.run.Close(ctx))
		n.run = nil
	}
	if n.svc != nil {
		errs = append(errs, n.svc.Close(ctx))
		n.svc = nil
	}
	for i := len(n.engines) - 1; i >= 0; i-- {
		errs = append(errs, n.engines[i].Close(ctx))
		n.engines[i].Conn().Close()
	}
	n.engines = nil
	return errors.Join(errs...)
}

// streamCounts is the message count of every stream.
func streamCounts(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]uint64{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = s.CachedInfo().State.Msgs
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every function of a whole node answers every bad payload with a coded
// error (never internal, never silence) and keeps nothing of it; the node
// serves a run afterwards.
func TestBadInput(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	startUpNode(t, ns)
	// The caller is another process: its calls go over the bus.
	client := &node{t: t, e: enginetest.NewEngine(t, ns)}
	ctx := context.Background()
	fns, err := client.e.FunctionsList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) < 50 {
		t.Fatalf("the catalog lists %d functions; the node did not come up whole", len(fns))
	}
	table := map[string][]badPayload{}
	big := newBigBodies(int(client.e.Conn().MaxPayload()))
	for _, fn := range fns {
		if _, ok := sweepExcluded[fn.ID]; !ok {
			table[fn.ID] = badPayloads(t, fn, big)
		}
	}
	checkTables(t, fns, table)

	// The bad payloads: nothing of them may be kept.
	js := client.e.JetStream()
	before := streamCounts(t, js)
	results := sweep(ctx, client.e, table, false)
	stored := map[string]uint64{}
	t.Run("bad", func(t *testing.T) {
		for _, fn := range fns {
			if _, ok := table[fn.ID]; !ok {
				continue
			}
			t.Run(fn.ID, func(t *testing.T) {
				valid := validPayloads[fn.ID]
				for _, o := range results[fn.ID] {
					ok := slices.Contains(valid.payloads, o.p.name)
					checkOutcome(t, o, ok)
					if ok && o.err == nil && valid.stores != "" {
						stored[valid.stores]++
					}
				}
			})
		}
	})
	after := streamCounts(t, js)
	for name, n := range after {
		if name == subjects.SpanStream {
			continue // the trace store records every call, refused ones too
		}
		if want := before[name] + stored[name]; n != want {
			t.Errorf("stream %s holds %d messages after the bad payloads, want %d (%d before, %d valid calls that store)", name, n, want, before[name], stored[name])
		}
		checkNoMarker(t, js, name)
	}

	// The probes: any answer but internal or none.
	results = sweep(ctx, client.e, table, true)
	t.Run("probes", func(t *testing.T) {
		for _, fn := range fns {
			if _, ok := table[fn.ID]; !ok {
				continue
			}
			t.Run(fn.ID, func(t *testing.T) {
				for _, o := range results[fn.ID] {
					checkOutcome(t, o, true)
				}
			})
		}
	})

	// The node still serves: a session and a run to its end.
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := client.e.Trigger(ctx, "session::create", map[string]any{"display_name": "after the sweep"}, &created); err != nil || created.SessionID == "" {
		t.Fatalf("session::create after the sweep = %+v, %v", created, err)
	}
	evs := client.runToEnd(agent.RunStart{SessionID: created.SessionID, Provider: "scripted", Model: "echo",
		Messages: []agent.Message{userText("still there?")}}, 20*time.Second)
	if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
		t.Fatalf("the run after the sweep stopped with %q", last.StopReason)
	}
}

// checkTables fails t when the exclusion or allow tables name a function
// the catalog lacks or a payload the sweep does not send: stale entries
// would hide nothing but mislead.
func checkTables(t *testing.T, fns []engine.FunctionInfo, table map[string][]badPayload) {
	t.Helper()
	listed := func(id string) bool {
		return slices.ContainsFunc(fns, func(f engine.FunctionInfo) bool { return f.ID == id })
	}
	for id := range sweepExcluded {
		if !listed(id) {
			t.Errorf("sweepExcluded names %s, which the catalog does not list", id)
		}
	}
	for id, v := range validPayloads {
		if !listed(id) {
			t.Errorf("validPayloads names %s, which the catalog does not list", id)
			continue
		}
		for _, name := range v.payloads {
			if !slices.ContainsFunc(table[id], func(p badPayload) bool { return p.name == name }) {
				t.Errorf("validPayloads names payload %q of %s, which the sweep does not send", name, id)
			}
		}
	}
}

// sweep sends every payload of table (the probes or the others) to its
// function, a few at a time, and returns the outcomes by function id.
func sweep(ctx context.Context, e *engine.Engine, table map[string][]badPayload, probes bool) map[string][]outcome {
	results := map[string][]outcome{}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, 8)
	)
	for id, payloads := range table {
		for _, p := range payloads {
			if p.probe != probes {
				continue
			}
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				cctx, cancel := context.WithTimeout(ctx, badCallTimeout)
				defer cancel()
				start := time.Now()
				body, codec, err := e.TriggerRaw(cctx, id, p.body, p.codec)
				o := outcome{p: p, err: err, took: time.Since(start)}
				if err == nil {
					if derr := codec.Unmarshal(body, &o.reply); derr != nil {
						o.err = fmt.Errorf("the reply does not decode: %w", derr)
					}
				}
				mu.Lock()
				results[id] = append(results[id], o)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return results
}

// checkOutcome fails t unless o is a clear answer: a coded catalog error
// that is not internal and not a missing answer, or a success where the
// payload is valid.
func checkOutcome(t *testing.T, o outcome, valid bool) {
	t.Helper()
	if o.err == nil {
		if o.p.probe {
			t.Logf("%s: probe succeeded (%s)", o.p.name, excerptJSON(o.reply))
			return
		}
		if !valid {
			t.Errorf("%s: succeeded (%s); want invalid_payload, or list it in validPayloads with the contract that makes it valid", o.p.name, excerptJSON(o.reply))
		}
		return
	}
	var we *wire.Error
	if !errors.As(o.err, &we) {
		t.Errorf("%s: error %T %v is no wire error", o.p.name, o.err, o.err)
		return
	}
	if _, known := wire.Lookup(we.Code); !known {
		t.Errorf("%s: code %q is not in the catalog", o.p.name, we.Code)
	}
	switch we.Code {
	case wire.CodeInternal, wire.CodeTimeout, wire.CodeFunctionNotFound, wire.CodeCanceled:
		t.Errorf("%s: answered %s after %v: %s", o.p.name, we.Code, o.took.Round(time.Millisecond), excerpt([]byte(we.Message)))
	default:
		if !valid && !o.p.probe && we.Code != wire.CodeInvalidPayload {
			t.Logf("%s: %s: %s", o.p.name, we.Code, excerpt([]byte(we.Message)))
		}
	}
}

// checkNoMarker fails t when a subject or a message of stream holds
// badMarker.
func checkNoMarker(t *testing.T, js jetstream.JetStream, stream string) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	for subj := range info.State.Subjects {
		if strings.Contains(strings.ToLower(subj), badMarker) {
			t.Errorf("stream %s has subject %s from a bad call", stream, subj)
		}
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		if bytes.Contains(m.Data, []byte(badMarker)) {
			t.Errorf("stream %s message %d (%s) holds a bad id: %s", stream, seq, m.Subject, excerpt(m.Data))
		}
	}
}

func excerptJSON(v any) string {
	b, _ := json.Marshal(v)
	return excerpt(b)
}

func excerpt(b []byte) string {
	const max = 200
	if len(b) > max {
		return fmt.Sprintf("%s… (%d bytes)", b[:max], len(b))
	}
	return string(b)
}
