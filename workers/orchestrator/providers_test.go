package orchestrator_test

// Turns through the real provider workers (the official Anthropic and
// OpenAI SDKs) pointed at local servers that speak each vendor's streaming
// wire format: a function call, a budget that runs out mid-conversation, a
// 401, and a scan of everything the bus stored, logged and traced for the
// API keys.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers"
	"github.com/iii-on-nats/iii/workers/anthropic"
	"github.com/iii-on-nats/iii/workers/auth"
	"github.com/iii-on-nats/iii/workers/budget"
	"github.com/iii-on-nats/iii/workers/models"
	"github.com/iii-on-nats/iii/workers/openai"
	"github.com/iii-on-nats/iii/workers/orchestrator"
	"github.com/iii-on-nats/iii/workers/policy"
	"github.com/iii-on-nats/iii/workers/sessiontree"
)

// The keys the vault holds; nothing but the vendors' servers may see them.
const (
	anthropicKey = "sk-ant-api03-E2ESECRETanthropicKEYdoNotLeak0123456789"
	openaiKey    = "sk-proj-E2ESECREToPENAIkeyDoNotLeak9876543210abcdef"
)

// fakeVendor answers the model calls of one conversation: the first call
// of a conversation (no function result yet) asks for math::add, the next
// answers in text. It fails with 401 for a request whose first user text
// says "unauthorized".
type fakeVendor struct {
	t     *testing.T
	key   string // the credential it expects
	calls atomic.Int64
	// usage is the input tokens the first answer reports (the budget
	// test makes the first call expensive).
	firstInput int
	sse        func(call bool, input int) string
	keyOf      func(r *http.Request) string
}

func (f *fakeVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	body, _ := io.ReadAll(r.Body)
	if got := f.keyOf(r); got != f.key {
		f.t.Errorf("%s: credential %q, want the vault's", r.URL.Path, got)
	}
	if bytes.Contains(body, []byte("unauthorized")) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		return
	}
	// A tool result in the request means the function ran: answer text.
	call := !bytes.Contains(body, []byte(`"tool_result"`)) && !bytes.Contains(body, []byte(`"role":"tool"`))
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, f.sse(call, f.firstInput))
}

func anthropicSSE(call bool, input int) string {
	if call {
		return "event: message_start\n" +
			`data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":` + fmt.Sprint(input) + `,"output_tokens":1}}}` + "\n\n" +
			"event: content_block_start\n" +
			`data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"math__add","input":{}}}` + "\n\n" +
			"event: content_block_delta\n" +
			`data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 2, "}}` + "\n\n" +
			"event: content_block_delta\n" +
			`data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"b\": 3}"}}` + "\n\n" +
			"event: content_block_stop\n" +
			`data: {"type":"content_block_stop","index":0}` + "\n\n" +
			"event: message_delta\n" +
			`data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":20}}` + "\n\n" +
			"event: message_stop\n" +
			`data: {"type":"message_stop"}` + "\n\n"
	}
	return "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"msg_02","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":120,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_start\n" +
		`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
		"event: content_block_delta\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"The sum "}}` + "\n\n" +
		"event: content_block_delta\n" +
		`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"is 5."}}` + "\n\n" +
		"event: content_block_stop\n" +
		`data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":6}}` + "\n\n" +
		"event: message_stop\n" +
		`data: {"type":"message_stop"}` + "\n\n"
}

func openaiSSE(call bool, input int) string {
	chunk := func(s string) string { return "data: " + s + "\n\n" }
	head := `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764460800,"model":"gpt-test",`
	if call {
		return chunk(head+`"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_01","type":"function","function":{"name":"math__add","arguments":""}}]},"finish_reason":null}]}`) +
			chunk(head+`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":2,"}}]},"finish_reason":null}]}`) +
			chunk(head+`"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"b\":3}"}}]},"finish_reason":null}]}`) +
			chunk(head+`"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`) +
			chunk(head+`"choices":[],"usage":{"prompt_tokens":`+fmt.Sprint(input)+`,"completion_tokens":20,"total_tokens":`+fmt.Sprint(input+20)+`}}`) +
			"data: [DONE]\n\n"
	}
	return chunk(head+`"choices":[{"index":0,"delta":{"role":"assistant","content":"The sum "},"finish_reason":null}]}`) +
		chunk(head+`"choices":[{"index":0,"delta":{"content":"is 5."},"finish_reason":null}]}`) +
		chunk(head+`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`) +
		chunk(head+`"choices":[],"usage":{"prompt_tokens":120,"completion_tokens":6,"total_tokens":126}}`) +
		"data: [DONE]\n\n"
}

func TestProvidersEndToEnd(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := context.Background()
	logs := &enginetest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := enginetest.NewEngine(t, ns, engine.WithLogger(logger), engine.WithTracerProvider(tp))

	vendors := map[string]*fakeVendor{
		"anthropic": {t: t, key: anthropicKey, sse: anthropicSSE, keyOf: func(r *http.Request) string { return r.Header.Get("X-Api-Key") }},
		"openai": {t: t, key: openaiKey, sse: openaiSSE, keyOf: func(r *http.Request) string {
			return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}},
	}
	urls := map[string]string{}
	for name, v := range vendors {
		srv := httptest.NewServer(v)
		t.Cleanup(srv.Close)
		urls[name] = srv.URL
	}
	noEnv := func(string) (string, bool) { return "", false }
	ap, err := anthropic.New(anthropic.WithBaseURL(urls["anthropic"]), anthropic.WithLogger(logger), anthropic.WithEnvLookup(noEnv), anthropic.WithBackoff(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	op, err := openai.New(openai.WithBaseURL(urls["openai"]+"/v1"), openai.WithLogger(logger), openai.WithLookupEnv(noEnv), openai.WithBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	price := agent.Pricing{InputPer1M: 1, OutputPer1M: 1}
	orch := orchestrator.New()
	if err := orch.Provision(ctx, workers.Env{Logger: logger}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	for _, w := range []interface {
		Start(context.Context, *engine.Engine) error
		Close(context.Context) error
	}{
		policy.NewWorker("", policy.WithFallback([]byte(allowAll)), policy.WithLogger(logger)),
		sessiontree.NewWorker(sessiontree.WithLogger(logger)),
		auth.NewWorker(auth.WithVaultPath(filepath.Join(t.TempDir(), "auth", "credentials.json")), auth.WithLogger(logger), auth.WithGetenv(func(string) string { return "" })),
		models.NewWorker(models.WithLogger(logger), models.WithCatalog([]agent.Model{
			{ID: "claude-test", Provider: "anthropic", ContextWindow: 200_000, MaxOutputTokens: 1000, SupportsTools: true, Pricing: price},
			{ID: "gpt-test", Provider: "openai", ContextWindow: 200_000, MaxOutputTokens: 1000, SupportsTools: true, Pricing: price},
		})),
		budget.NewWorker(budget.WithLogger(logger)),
		anthropic.NewWorker(ap),
		openai.NewWorker(op),
		orch,
	} {
		if err := w.Start(ctx, e); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close(context.Background()) })
	}
	tools, err := e.Worker("tools")
	if err != nil {
		t.Fatal(err)
	}
	type addReq struct {
		A float64 `json:"a"`
		B float64 `json:"b"`
	}
	if err := tools.Register(engine.Function{ID: "math::add", Description: "Add two numbers.",
		RequestSchema: `{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`,
		Handler: engine.Typed(func(_ context.Context, r addReq) (map[string]any, error) {
			calls.Add(1)
			return map[string]any{"sum": r.A + r.B}, nil
		})}); err != nil {
		t.Fatal(err)
	}
	for provider, key := range map[string]string{"anthropic": anthropicKey, "openai": openaiKey} {
		if err := e.Trigger(ctx, "auth::set_token", map[string]any{"provider": provider, "credential": map[string]string{"type": "api_key", "key": key}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	run := func(sid, provider, model, ws, text string) []agent.Event {
		t.Helper()
		var res orchestrator.RunStartResult
		if err := e.Trigger(ctx, "run::start", agent.RunStart{SessionID: sid, Provider: provider, Model: model, WorkspaceID: ws,
			Tools: []string{"math::*"}, Messages: []agent.Message{userText(text)}}, &res); err != nil || !res.Started {
			t.Fatalf("run::start %s = %+v, %v", sid, res, err)
		}
		return events(t, e, sid, 30*time.Second)
	}

	for _, p := range []struct{ provider, model string }{{"anthropic", "claude-test"}, {"openai", "gpt-test"}} {
		v := vendors[p.provider]
		// A whole conversation: the model calls math::add, then answers.
		evs := run("full_"+p.provider, p.provider, p.model, "", "what is 2 + 3?")
		if last := evs[len(evs)-1]; last.StopReason != agent.StopEnd {
			t.Fatalf("%s: stop %q: %v", p.provider, last.StopReason, types(evs))
		}
		r := onlyResult(t, evs)
		if r.Result == nil || r.Result.IsError || !strings.Contains(r.Result.Content[0].Text, "5") {
			t.Fatalf("%s: result %+v", p.provider, r.Result)
		}
		var answer string
		for _, ev := range evs {
			if ev.Type == agent.EventMessageComplete && ev.Message != nil && ev.Message.Role == agent.RoleAssistant {
				for _, c := range ev.Message.Content {
					answer += c.Text
				}
			}
		}
		if !strings.Contains(answer, "The sum is 5.") {
			t.Fatalf("%s: answer %q", p.provider, answer)
		}

		// A budget that runs out mid-conversation: the first call reports
		// 50,000 input tokens ($0.05 at $1 per million), over the $0.04
		// ceiling, so the second call is refused.
		ws := "ws_" + p.provider
		createBudgetOn(t, e, ws, 0.04)
		v.firstInput = 50_000
		before := v.calls.Load()
		evs = run("budget_"+p.provider, p.provider, p.model, ws, "what is 2 + 3 on a budget?")
		if last := evs[len(evs)-1]; last.StopReason != agent.StopBudgetExceeded {
			t.Fatalf("%s: stop %q: %v", p.provider, last.StopReason, types(evs))
		}
		if n := v.calls.Load() - before; n != 1 {
			t.Fatalf("%s: %d model calls, want 1 before the budget ran out", p.provider, n)
		}
		v.firstInput = 100

		// A 401: the run fails with auth_expired, and says so without the key.
		evs = run("unauth_"+p.provider, p.provider, p.model, "", "unauthorized please")
		if last := evs[len(evs)-1]; last.StopReason != agent.StopError {
			t.Fatalf("%s: stop %q: %v", p.provider, last.StopReason, types(evs))
		}
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("math::add ran %d times, want 4 (two conversations, two budget runs)", n)
	}

	// No key anywhere: stored messages (events, transcripts, records,
	// ledgers), logs and spans.
	_ = e.Conn().Flush()
	tp.ForceFlush(ctx)
	var haystack bytes.Buffer
	haystack.WriteString(logs.String())
	for _, s := range spans.Ended() {
		fmt.Fprintf(&haystack, "%s %v %v %v\n", s.Name(), s.Attributes(), s.Events(), s.Status())
	}
	js := e.JetStream()
	for name := range js.StreamNames(ctx).Name() {
		dumpStream(t, js, name, &haystack)
	}
	for _, key := range []string{anthropicKey, openaiKey, anthropicKey[:20], openaiKey[:20]} {
		if i := bytes.Index(haystack.Bytes(), []byte(key)); i >= 0 {
			lo := max(i-200, 0)
			t.Fatalf("a key leaked: …%s…", haystack.Bytes()[lo:min(i+100, haystack.Len())])
		}
	}
	if haystack.Len() < 10_000 || !strings.Contains(haystack.String(), "math::add") {
		t.Fatalf("the scan read too little (%d bytes)", haystack.Len())
	}
}

func createBudgetOn(t *testing.T, e *engine.Engine, ws string, ceiling float64) {
	t.Helper()
	if err := e.Trigger(context.Background(), "budget::create", map[string]any{"ceiling_usd": ceiling, "period": "day", "workspace_id": ws}, nil); err != nil {
		t.Fatal(err)
	}
}

// dumpStream appends every message of stream name (subjects, headers,
// data) to out.
func dumpStream(t *testing.T, js jetstream.JetStream, name string, out *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for n := uint64(0); n < info.State.Msgs; n++ {
		m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
		if err != nil {
			break // messages deleted since (KV updates, acked work)
		}
		hdr, _ := json.Marshal(m.Headers())
		fmt.Fprintf(out, "%s %s %s\n", m.Subject(), hdr, m.Data())
	}
}
