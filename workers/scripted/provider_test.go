package scripted_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/scripted"
)

func newProvider(t *testing.T, opts ...scripted.Option) *scripted.Provider {
	t.Helper()
	p, err := scripted.New(append([]scripted.Option{scripted.WithClock(fixedClock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	fn := scripted.Sequence(scripted.Reply{Text: "x"})
	tests := []struct {
		name string
		opts []scripted.Option
	}{
		{"delta size 0", []scripted.Option{scripted.WithDeltaSize(0)}},
		{"delta size too big", []scripted.Option{scripted.WithDeltaSize(scripted.MaxDeltaSize + 1)}},
		{"negative interval", []scripted.Option{scripted.WithDeltaInterval(-time.Millisecond)}},
		{"interval too long", []scripted.Option{scripted.WithDeltaInterval(time.Hour)}},
		{"nil clock", []scripted.Option{scripted.WithClock(nil)}},
		{"empty model", []scripted.Option{scripted.WithScript("", fn)}},
		{"nil script", []scripted.Option{scripted.WithScript("m", nil)}},
		{"model twice", []scripted.Option{scripted.WithScript("m", fn), scripted.WithScript("m", fn)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := scripted.New(tt.opts...); !errors.Is(err, engine.ErrInvalidOption) {
				t.Fatalf("New = %v, want ErrInvalidOption", err)
			}
		})
	}
	p, err := scripted.New(scripted.WithScript("b", fn), scripted.WithScript("a", fn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Models(), ","); got != "a,b,echo" {
		t.Fatalf("Models() = %s", got)
	}
}

func TestDeltasNeverSplitCharacters(t *testing.T) {
	t.Parallel()
	const text = "héllo wörld ✓✓ 🎉 done"
	for _, size := range []int{1, 2, 3, 5, 8, 64} {
		p := newProvider(t, scripted.WithDeltaSize(size))
		evs, err := p.Events(userReq("echo", text))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := deltas(evs, agent.ModelTextDelta, 0)
		if got != text {
			t.Fatalf("size %d: deltas %q", size, got)
		}
		for _, ev := range evs {
			if ev.Type != agent.ModelTextDelta {
				continue
			}
			if !utf8.ValidString(ev.Delta) || (len(ev.Delta) > size && utf8.RuneCountInString(ev.Delta) != 1) {
				t.Fatalf("size %d: delta %q", size, ev.Delta)
			}
		}
	}
}

func TestMaxTokensCutsAnswer(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	req := userReq("echo", "0123456789abcdefghijklmnopqrstuvwxyz\n/call a::b")
	req.MaxTokens = 3
	evs, err := p.Events(req)
	if err != nil {
		t.Fatal(err)
	}
	msg := last(evs).Message
	if msg.StopReason != agent.StopLength || textOfMsg(msg) != "0123456789ab" || msg.FunctionCalls() != nil || msg.Usage.OutputTokens != 3 {
		t.Fatalf("message %+v", msg)
	}
	// A budget that holds the text but not the call drops the call whole.
	req.MaxTokens = 10
	evs, _ = p.Events(req)
	if msg := last(evs).Message; msg.StopReason != agent.StopLength || len(msg.Content) != 1 {
		t.Fatalf("message %+v", msg)
	}
}

func TestScriptErrorsBecomeFailures(t *testing.T) {
	t.Parallel()
	p := newProvider(t,
		scripted.WithScript("err", func(scripted.StreamRequest) (scripted.Reply, error) { return scripted.Reply{}, errors.New("boom") }),
		scripted.WithScript("panic", func(scripted.StreamRequest) (scripted.Reply, error) { panic("oops") }),
		scripted.WithScript("bad-kind", scripted.Sequence(scripted.Reply{Fail: "meh"})),
		scripted.WithScript("bad-stop", scripted.Sequence(scripted.Reply{StopReason: "bored"})),
		scripted.WithScript("bad-call", scripted.Sequence(scripted.Reply{Calls: []scripted.Call{{FunctionID: "has space"}}})),
		scripted.WithScript("bad-call-id", scripted.Sequence(scripted.Reply{Calls: []scripted.Call{{ID: "a.b", FunctionID: "f::g"}}})),
		scripted.WithScript("dup-call-id", scripted.Sequence(scripted.Reply{Calls: []scripted.Call{{ID: "c", FunctionID: "f::g"}, {ID: "c", FunctionID: "f::h"}}})),
		scripted.WithScript("bad-args", scripted.Sequence(scripted.Reply{Calls: []scripted.Call{{FunctionID: "f::g", Arguments: map[string]any{"f": func() {}}}}})),
		scripted.WithScript("negative-delay", scripted.Sequence(scripted.Reply{Delay: -1})),
		scripted.WithScript("refuses", func(scripted.StreamRequest) (scripted.Reply, error) {
			return scripted.Reply{}, wire.Errorf(wire.CodeInvalidPayload, "no")
		}),
	)
	for _, model := range []string{"err", "panic", "bad-kind", "bad-stop", "bad-call", "bad-call-id", "dup-call-id", "bad-args", "negative-delay"} {
		evs, err := p.Events(userReq(model, "x"))
		if err != nil || len(evs) != 1 || evs[0].Type != agent.ModelError || evs[0].Kind != agent.ErrorPermanent {
			t.Errorf("%s: events %+v, err %v, want one permanent error", model, evs, err)
		}
	}
	if _, err := p.Events(userReq("refuses", "x")); !errors.Is(err, wire.ErrInvalidPayload) {
		t.Errorf("refuses: %v, want invalid_payload", err)
	}
	if _, err := p.Events(userReq("nope", "x")); !errors.Is(err, wire.ErrInvalidPayload) || !errors.Is(err, scripted.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
}

func TestEcho(t *testing.T) {
	t.Parallel()
	user := func(s string) []agent.Message { return []agent.Message{agent.UserText(s, 1)} }
	tests := []struct {
		name     string
		messages []agent.Message
		want     scripted.Reply
	}{
		{"plain text is exact", user("  hi\n\n"), scripted.Reply{Text: "  hi\n\n"}},
		{"blank lines around commands dropped", user("\n/call a::b\n\nhi\n\n"), scripted.Reply{Text: "hi", Calls: []scripted.Call{{FunctionID: "a::b", Arguments: map[string]any{}}}}},
		{"crlf", user("/sleep 5\r\nhi\r\n"), scripted.Reply{Text: "hi", Delay: 5 * time.Millisecond}},
		{"plain crlf text is exact", user("a\r\nb\r\n"), scripted.Reply{Text: "a\r\nb\r\n"}},
		{"sleeps add up", user("/sleep 5\n/sleep 7"), scripted.Reply{Delay: 12 * time.Millisecond}},
		{"fail with message", user("/fail rate_limited  slow   down"), scripted.Reply{Fail: agent.ErrorRateLimited, FailMessage: "slow   down"}},
		{"think lines", user("/think a\n/think b\nok"), scripted.Reply{Thinking: "a\nb", Text: "ok"}},
		{"not a command", user("/calls a::b\n/usr/bin/env"), scripted.Reply{Text: "/calls a::b\n/usr/bin/env"}},
		{"latest user message", []agent.Message{agent.UserText("old", 1), {Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("x")}}, agent.UserText("new", 2)}, scripted.Reply{Text: "new"}},
		{"image result", []agent.Message{agent.UserText("x", 1), {Role: agent.RoleAssistant}, {Role: agent.RoleFunctionResult, FunctionCallID: "c", FunctionID: "img::get", Content: []agent.Content{{Type: agent.ContentImage, Mime: "image/png", Data: "AA=="}}}}, scripted.Reply{Text: "function img::get returned: [image image/png]"}},
		{"no user message", []agent.Message{{Role: agent.RoleAssistant}}, scripted.Reply{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := scripted.Echo(scripted.StreamRequest{Model: "echo", Messages: tt.messages})
			if err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tt.want)
			if string(gj) != string(wj) {
				t.Fatalf("Echo = %s, want %s", gj, wj)
			}
		})
	}
	for _, bad := range []string{"/call", "/call a::b {", "/call a::b 1", "/call a::b null", "/call ::", "/fail", "/fail nope",
		"/fail transient\n/fail permanent", "/sleep", "/sleep -1", "/sleep 1.5", "/sleep 60001", "/sleep 40000\n/sleep 40000"} {
		got, err := scripted.Echo(scripted.StreamRequest{Model: "echo", Messages: user(bad)})
		if err != nil || got.Fail != agent.ErrorPermanent || !strings.Contains(got.FailMessage, "line") {
			t.Errorf("Echo(%q) = %+v, %v, want a permanent failure naming the line", bad, got, err)
		}
	}
}

func TestCallIDsFollowThePosition(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	ids := func(req scripted.StreamRequest) []string {
		evs, err := p.Events(req)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range last(evs).Message.FunctionCalls() {
			out = append(out, c.ID)
		}
		return out
	}
	req := userReq("echo", "/call a::b\n/call a::b")
	a := ids(req)
	if len(a) != 2 || a[0] == a[1] || !strings.HasPrefix(a[0], "call_") {
		t.Fatalf("ids %v", a)
	}
	if b := ids(req); strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("ids changed: %v then %v", a, b)
	}
	later := req
	later.Messages = append([]agent.Message{agent.UserText("earlier", 0), {Role: agent.RoleAssistant}}, req.Messages...)
	if c := ids(later); c[0] == a[0] {
		t.Fatalf("a later position reuses id %s", c[0])
	}
}

func TestModuleRegistered(t *testing.T) {
	t.Parallel()
	m, err := workers.Global().Module(scripted.WorkerName)
	if err != nil || m.Description == "" {
		t.Fatalf("module %+v, %v", m, err)
	}
	ns := enginetest.RunServer(t)
	env := workers.Env{Settings: map[string]map[string]string{scripted.WorkerName: {"delta_size": "4", "delta_interval": "1ms"}}}
	run, err := workers.Global().Start(t.Context(), enginetest.NewEngine(t, ns), env, scripted.WorkerName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := run.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	e := enginetest.NewEngine(t, ns)
	res := stream(t, e, userReq("echo", "abcdefghij"))
	if res.err != nil {
		t.Fatal(res.err)
	}
	if got, n := deltas(res.events, agent.ModelTextDelta, 0); got != "abcdefghij" || n != 3 {
		t.Fatalf("deltas %q in %d events, want 3 of at most 4 bytes", got, n)
	}
	// Both functions are in the catalog with schemas.
	for _, id := range []string{scripted.StreamFunction, scripted.CompleteFunction} {
		if err := e.Trigger(t.Context(), id, map[string]any{}, nil); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%s with an empty request: %v, want invalid_payload", id, err)
		}
	}
}

func TestProvisionSettings(t *testing.T) {
	t.Parallel()
	for _, settings := range []map[string]string{
		{"delta_size": "zero"},
		{"delta_size": "0"},
		{"delta_interval": "soon"},
		{"delta_interval": "-1s"},
		{"colour": "blue"},
	} {
		w := scripted.NewWorker(nil)
		err := w.Provision(t.Context(), workers.Env{Settings: map[string]map[string]string{scripted.WorkerName: settings}})
		if !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("Provision(%v) = %v, want ErrInvalidOption", settings, err)
		}
	}
	// A worker given a provider ignores settings.
	w := scripted.NewWorker(newProvider(t))
	if err := w.Provision(t.Context(), workers.Env{Settings: map[string]map[string]string{scripted.WorkerName: {"colour": "blue"}}}); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerStartTwice(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	w := scripted.NewWorker(nil)
	if err := w.Start(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(t.Context(), e); !errors.Is(err, scripted.ErrStarted) {
		t.Fatalf("second Start = %v", err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := w.Start(t.Context(), e); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
}

func TestSchemasAreJSON(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	w := scripted.NewWorker(nil)
	if err := w.Start(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	defer w.Close(t.Context())
	info, err := e.Conn().Request("$SRV.INFO."+scripted.WorkerName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var svc struct {
		Endpoints []struct {
			Metadata map[string]string `json:"metadata"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(info.Data, &svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Endpoints) != 3 {
		t.Fatalf("endpoints %+v", svc.Endpoints)
	}
	for _, ep := range svc.Endpoints {
		for _, k := range []string{engine.MetaRequestSchema, engine.MetaResponseSchema} {
			if !json.Valid([]byte(ep.Metadata[k])) {
				t.Errorf("%s %s is not JSON: %s", ep.Metadata[engine.MetaFunctionID], k, ep.Metadata[k])
			}
		}
	}
}

func TestToolsCountAsInput(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	req := userReq("echo", "hi")
	input := func() int64 {
		evs, err := p.Events(req)
		if err != nil {
			t.Fatal(err)
		}
		return last(evs).Message.Usage.InputTokens
	}
	without := input()
	req.SystemPrompt = "be brief"
	req.Tools = []any{
		map[string]any{"name": "fs::read", "description": "read a file", "parameters": map[string]any{"type": "object"}},
		map[string]any{"type": "function", "function": map[string]any{"name": "shell_exec"}},
	}
	if with := input(); with <= without+2 {
		t.Fatalf("input tokens %d with a system prompt and tools, %d without", with, without)
	}
}

// A transcript a vendor's API would refuse (a function result that
// answers no call, or answers one twice) is a permanent model error.
func TestTranscriptPairsChecked(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	call := agent.Message{Role: agent.RoleAssistant, StopReason: agent.StopFunctionCall,
		Content: []agent.Content{{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "f::g"}}}
	result := func(id string) agent.Message {
		return agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: id, FunctionID: "f::g", Content: []agent.Content{agent.Text("ok")}}
	}
	user := agent.UserText("hi", 1)
	tests := []struct {
		name string
		msgs []agent.Message
		want string // in the error; "" means answered
	}{
		{"paired", []agent.Message{user, call, result("c1")}, ""},
		{"unanswered call", []agent.Message{user, call, user}, ""},
		{"orphan result", []agent.Message{user, result("c1")}, "did not make"},
		{"result twice", []agent.Message{user, call, result("c1"), result("c1")}, "a second time"},
		{"unknown id", []agent.Message{user, call, result("c2")}, `"c2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := userReq("echo", "x")
			req.Messages = tt.msgs
			evs, err := p.Events(req)
			if err != nil {
				t.Fatal(err)
			}
			ev := last(evs)
			if tt.want == "" {
				if ev.Type != agent.ModelDone {
					t.Fatalf("events end with %+v, want done", ev)
				}
				return
			}
			if ev.Type != agent.ModelError || ev.Kind != agent.ErrorPermanent || !strings.Contains(ev.Error, tt.want) {
				t.Fatalf("events end with %+v, want a permanent error with %q", ev, tt.want)
			}
		})
	}
}

// provider::scripted::models lists every model the provider serves: it
// listed echo alone, so models::reconcile marked a model scripted with
// WithScript as missing from its provider.
func TestModelsListsScriptedModels(t *testing.T) {
	t.Parallel()
	e, _, _ := setup(t, scripted.WithScript("two-step", scripted.Sequence(scripted.Reply{Text: "a"})))
	resp, err := engine.Call[scripted.ModelsResponse](t.Context(), e, scripted.ModelsFunction, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range resp.Models {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{scripted.EchoModel, "two-step"}) {
		t.Fatalf("models %v, want echo and two-step", ids)
	}
}

// An answer with no blocks (a prompt of only an image, only blank text,
// only a /sleep) ends with a done message whose content is an empty
// array, as the start event's and the other providers' are: not null.
func TestEmptyAnswerHasContentArray(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	for name, msg := range map[string]agent.Message{
		"image only": {Role: agent.RoleUser, Content: []agent.Content{{Type: agent.ContentImage, Mime: "image/png", Data: "AA=="}}},
		"empty text": agent.UserText("", 1),
		"sleep only": agent.UserText("/sleep 0", 1),
	} {
		evs, err := p.Events(scripted.StreamRequest{Model: scripted.EchoModel, Messages: []agent.Message{msg}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		done := evs[len(evs)-1]
		if done.Type != agent.ModelDone || done.Message.StopReason != agent.StopEnd {
			t.Fatalf("%s: last event %+v", name, done)
		}
		b, err := json.Marshal(done.Message)
		if err != nil || !strings.Contains(string(b), `"content":[]`) {
			t.Errorf("%s: done message %s (%v), want \"content\":[]", name, b, err)
		}
	}
}
