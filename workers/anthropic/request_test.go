package anthropic_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/anthropic"
)

// png1x1 is a 1×1 PNG, base64.
const png1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

// richTranscript has every shape the mapping handles: images, thinking,
// parallel calls with an id the API would refuse, results out of order,
// an orphaned call answered later by a user message, a result whose call
// is unknown, and a final orphaned call.
func richTranscript() []agent.Message {
	return []agent.Message{
		{Role: agent.RoleUser, Content: []agent.Content{agent.Text("What's the weather? See the map."), {Type: agent.ContentImage, Mime: "image/png", Data: png1x1}}, Timestamp: 1},
		{Role: agent.RoleAssistant, Content: []agent.Content{
			{Type: agent.ContentThinking, Text: "The user wants the weather."},
			agent.Text("Checking."),
			{Type: agent.ContentFunctionCall, ID: "toolu_A", FunctionID: "weather::get", Arguments: map[string]any{"location": "SF"}},
			{Type: agent.ContentFunctionCall, ID: "call:1", FunctionID: "clock::now"},
		}, StopReason: agent.StopFunctionCall, Model: "claude-sonnet-4-5", Provider: "anthropic", Timestamp: 2},
		{Role: agent.RoleFunctionResult, FunctionCallID: "call:1", FunctionID: "clock::now", Content: []agent.Content{agent.Text("boom")}, IsError: true, Timestamp: 3},
		{Role: agent.RoleFunctionResult, FunctionCallID: "toolu_A", FunctionID: "weather::get", Content: []agent.Content{agent.Text("72°F"), {Type: agent.ContentImage, Mime: "image/jpg", Data: png1x1}}, Timestamp: 4},
		agent.UserText("Thanks. And the time?", 5),
		{Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentFunctionCall, ID: "toolu_B", FunctionID: "clock::now"}}, StopReason: agent.StopFunctionCall, Timestamp: 6},
		agent.UserText("Still there?", 7),
		{Role: agent.RoleFunctionResult, FunctionCallID: "toolu_Z", FunctionID: "fs::read", Content: []agent.Content{agent.Text("late result")}, Timestamp: 8},
		{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("Reading."), {Type: agent.ContentFunctionCall, ID: "toolu_C", FunctionID: "fs::read", Arguments: map[string]any{"path": "/etc/hosts"}}}, Timestamp: 9},
	}
}

var richTools = []agent.Tool{
	weatherTools[0],
	weatherTools[1],
	{FunctionID: "fs::read", Description: "Read a file", InputSchema: map[string]any{
		"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []any{"path"}, "additionalProperties": false,
	}},
	weatherTools[1], // offered twice: sent once
}

// TestRequestMapping compares the bodies the API receives with golden
// files.
func TestRequestMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  anthropic.CompleteRequest
	}{
		{name: "rich", req: anthropic.CompleteRequest{
			SystemPrompt: "You are a helpful assistant.", Model: "claude-sonnet-4-5", Messages: richTranscript(),
			Tools: richTools, ThinkingLevel: "high", SessionID: "s1",
		}},
		{name: "thinking", req: anthropic.CompleteRequest{
			Model: "claude-sonnet-4-5", Messages: []agent.Message{agent.UserText("27 * 453?", 1)}, ThinkingLevel: "medium",
		}},
		{name: "thinking_small_max", req: anthropic.CompleteRequest{
			Model: "claude-opus-4-1", Messages: []agent.Message{agent.UserText("27 * 453?", 1)}, ThinkingLevel: "high", MaxTokens: 2000,
		}},
		{name: "no_tools", req: anthropic.CompleteRequest{
			SystemPrompt: "Summarize the conversation.", Model: "claude-haiku-4-5", Messages: richTranscript()[:5], MaxTokens: 1024,
		}},
		{name: "unknown_model", req: anthropic.CompleteRequest{
			Model: "claude-future-9", Messages: []agent.Message{
				{Role: agent.RoleAssistant, Content: []agent.Content{agent.Text("(an assistant message first)")}},
				{Role: agent.RoleUser, Content: []agent.Content{{Type: agent.ContentImage, Mime: "image/svg+xml", Data: "PHN2Zz4="}}},
			},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, ok(sse(t, "text")))
			en := setup(t, api, config{})
			res, err := engine.Call[anthropic.CompleteResponse](t.Context(), en.e, anthropic.CompleteFunction, tc.req)
			msg := res.Message
			if err != nil {
				t.Fatal(err)
			}
			if msg.Content[0].Text != "Hello!" {
				t.Fatalf("message %+v", msg)
			}
			got := api.received()
			if len(got) != 1 || got[0].method != "POST" || got[0].path != "/v1/messages" {
				t.Fatalf("requests %+v", got)
			}
			golden(t, "request_"+tc.name, normalJSON(t, got[0].body))
		})
	}
}

func TestAPIKeyHeaders(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "text")))
	en := setup(t, api, config{})
	en.stream(t, userReq("Hello"), nil)
	h := api.received()[0].header
	if h.Get("X-Api-Key") != testKey || h.Get("Authorization") != "" {
		t.Fatalf("x-api-key %q, authorization %q", h.Get("X-Api-Key"), h.Get("Authorization"))
	}
	if h.Get("Anthropic-Version") == "" || !strings.Contains(h.Get("Content-Type"), "application/json") {
		t.Fatalf("headers %v", h)
	}
	if h.Get("X-Stainless-Retry-Count") != "0" {
		t.Fatalf("retry count header %q", h.Get("X-Stainless-Retry-Count"))
	}
}

func TestOAuthBearer(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "text")))
	en := setup(t, api, config{cred: &agent.Credential{Type: agent.CredentialOAuth, AccessToken: "sk-ant-oat01-ACCESS", RefreshToken: "sk-ant-ort01-REFRESH"}})
	res := en.stream(t, userReq("Hello"), nil)
	if res.Reply.StopReason != agent.StopEnd {
		t.Fatalf("reply %+v", res.Reply)
	}
	h := api.received()[0].header
	if h.Get("Authorization") != "Bearer sk-ant-oat01-ACCESS" || h.Get("X-Api-Key") != "" {
		t.Fatalf("authorization %q, x-api-key %q", h.Get("Authorization"), h.Get("X-Api-Key"))
	}
	if !strings.Contains(strings.Join(h.Values("Anthropic-Beta"), ","), "oauth-2025-04-20") {
		t.Fatalf("anthropic-beta %q", h.Values("Anthropic-Beta"))
	}
}

func TestCredentialSources(t *testing.T) {
	t.Parallel()
	const envKey = "sk-ant-from-env"
	for _, tc := range []struct {
		name    string
		cfg     config
		wantKey string // "" : no credential at all
	}{
		{name: "no auth worker, env", cfg: config{noAuth: true, env: map[string]string{"ANTHROPIC_API_KEY": envKey}}, wantKey: envKey},
		{name: "auth has none, env", cfg: config{env: map[string]string{"ANTHROPIC_API_KEY": envKey}}, wantKey: envKey},
		{name: "custom variable", cfg: config{noAuth: true, env: map[string]string{"MY_KEY": envKey}, opts: []anthropic.Option{anthropic.WithAPIKeyEnv("MY_KEY")}}, wantKey: envKey},
		{name: "auth wins", cfg: config{cred: &agent.Credential{Type: agent.CredentialAPIKey, Key: testKey}, env: map[string]string{"ANTHROPIC_API_KEY": envKey}}, wantKey: testKey},
		{name: "nothing", cfg: config{noAuth: true, env: map[string]string{}}},
		{name: "auth null, no env", cfg: config{env: map[string]string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, ok(sse(t, "text")))
			en := setup(t, api, tc.cfg)
			res := en.stream(t, userReq("Hello"), nil)
			got := api.received()
			if tc.wantKey == "" {
				if len(got) != 0 || len(res.Events) != 1 || res.Events[0].Kind != agent.ErrorAuthExpired ||
					!strings.Contains(res.Events[0].Error, "no credential") {
					t.Fatalf("requests %d, events %+v", len(got), res.Events)
				}
				return
			}
			if len(got) != 1 || got[0].header.Get("X-Api-Key") != tc.wantKey {
				t.Fatalf("requests %+v", got)
			}
		})
	}
}

func TestCredentialCache(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "text")))
	en := setup(t, api, config{})
	en.stream(t, userReq("one"), nil)
	en.stream(t, userReq("two"), nil)
	if n := en.auth.count(); n != 1 {
		t.Fatalf("auth asked %d times within the TTL, want 1", n)
	}
	en.auth.set(&agent.Credential{Type: agent.CredentialAPIKey, Key: "sk-ant-rotated"})
	en.now.Add(anthropic.DefaultCredentialTTL)
	en.stream(t, userReq("three"), nil)
	got := api.received()
	if n := en.auth.count(); n != 2 || got[2].header.Get("X-Api-Key") != "sk-ant-rotated" {
		t.Fatalf("auth asked %d times, third key %q", n, got[2].header.Get("X-Api-Key"))
	}
}

func TestExpiredOAuthTokenIsFetchedAgain(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "text")))
	en := setup(t, api, config{cred: &agent.Credential{Type: agent.CredentialOAuth, AccessToken: "tok-1", ExpiresAt: epoch.Add(time.Second).UnixMilli()}})
	en.stream(t, userReq("one"), nil)
	en.now.Add(2 * time.Second) // within the TTL, past the expiry
	en.auth.set(&agent.Credential{Type: agent.CredentialOAuth, AccessToken: "tok-2"})
	en.stream(t, userReq("two"), nil)
	got := api.received()
	if got[1].header.Get("Authorization") != "Bearer tok-2" || en.auth.count() != 2 {
		t.Fatalf("second authorization %q after %d auth calls", got[1].header.Get("Authorization"), en.auth.count())
	}
}

func TestCompleteErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		resp response
		code wire.Code
		kind agent.ErrorKind
	}{
		{"rate limited", apiError(429, "rate_limit_error", "slow down"), wire.CodeUnavailable, agent.ErrorRateLimited},
		{"unauthorized", apiError(401, "authentication_error", "invalid x-api-key"), wire.CodeForbidden, agent.ErrorAuthExpired},
		{"forbidden", apiError(403, "permission_error", "no access"), wire.CodeForbidden, agent.ErrorAuthExpired},
		{"overflow", apiError(400, "invalid_request_error", "prompt is too long: 300000 tokens > 200000 maximum"), wire.CodeInvalidPayload, agent.ErrorContextOverflow},
		{"bad request", apiError(400, "invalid_request_error", "messages: roles must alternate"), wire.CodeInternal, agent.ErrorPermanent},
		{"not found", apiError(404, "not_found_error", "model: claude-nope"), wire.CodeInternal, agent.ErrorPermanent},
		{"overloaded", apiError(529, "overloaded_error", "Overloaded"), wire.CodeUnavailable, agent.ErrorTransient},
		{"mid-stream", ok(sse(t, "error")), wire.CodeUnavailable, agent.ErrorTransient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t, tc.resp)
			en := setup(t, api, config{opts: []anthropic.Option{anthropic.WithMaxRetries(0)}})
			_, err := engine.Call[anthropic.CompleteResponse](t.Context(), en.e, anthropic.CompleteFunction, anthropic.CompleteRequest{Model: "m", Messages: []agent.Message{agent.UserText("hi", 1)}})
			var werr *wire.Error
			if !errors.As(err, &werr) || werr.Code != tc.code || werr.Details["kind"] != string(tc.kind) {
				t.Fatalf("error %#v, want code %s kind %s", err, tc.code, tc.kind)
			}
		})
	}
}

func TestCompleteRetriesAfterPartialAnswer(t *testing.T) {
	t.Parallel()
	// A complete call shows nothing before its reply, so a stream that
	// broke half-way may be tried again.
	api := newFakeAPI(t, ok(sse(t, "error")), ok(sse(t, "text")))
	en := setup(t, api, config{})
	res, err := engine.Call[anthropic.CompleteResponse](t.Context(), en.e, anthropic.CompleteFunction, anthropic.CompleteRequest{Model: "m", Messages: []agent.Message{agent.UserText("hi", 1)}})
	msg := res.Message
	if err != nil || msg.Content[0].Text != "Hello!" || len(api.received()) != 2 {
		t.Fatalf("message %+v, err %v, %d requests", msg, err, len(api.received()))
	}
}

func TestModels(t *testing.T) {
	t.Parallel()
	page1 := `{"data":[{"type":"model","id":"claude-sonnet-4-5-20250929","display_name":"Claude Sonnet 4.5","created_at":"2025-09-29T00:00:00Z","max_input_tokens":200000,"max_tokens":64000},` +
		`{"type":"model","id":"claude-opus-4-1-20250805","display_name":"Claude Opus 4.1","created_at":"2025-08-05T00:00:00Z"}],"has_more":true,"first_id":"claude-sonnet-4-5-20250929","last_id":"claude-opus-4-1-20250805"}`
	page2 := `{"data":[{"type":"model","id":"claude-3-haiku-20240307","display_name":"Claude Haiku 3","created_at":"2024-03-07T00:00:00Z"}],"has_more":false,"first_id":"claude-3-haiku-20240307","last_id":"claude-3-haiku-20240307"}`
	api := newFakeAPI(t, ok(page1), ok(page2))
	en := setup(t, api, config{})
	got, err := engine.Call[anthropic.ModelsResponse](t.Context(), en.e, anthropic.ModelsFunction, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	want := []anthropic.ModelInfo{
		{ID: "claude-sonnet-4-5-20250929", DisplayName: "Claude Sonnet 4.5", CreatedAt: "2025-09-29T00:00:00Z", ContextWindow: 200000, MaxOutputTokens: 64000},
		{ID: "claude-opus-4-1-20250805", DisplayName: "Claude Opus 4.1", CreatedAt: "2025-08-05T00:00:00Z"},
		{ID: "claude-3-haiku-20240307", DisplayName: "Claude Haiku 3", CreatedAt: "2024-03-07T00:00:00Z"},
	}
	if len(got.Models) != len(want) {
		t.Fatalf("models %+v", got.Models)
	}
	for i := range want {
		if got.Models[i] != want[i] {
			t.Errorf("models[%d] = %+v, want %+v", i, got.Models[i], want[i])
		}
	}
	reqs := api.received()
	if len(reqs) != 2 || reqs[0].method != "GET" || reqs[0].path != "/v1/models" || reqs[0].header.Get("X-Api-Key") != testKey {
		t.Fatalf("requests %+v", reqs)
	}
	if !strings.Contains(reqs[1].query, "after_id=claude-opus-4-1-20250805") || reqs[1].header.Get("X-Api-Key") != testKey {
		t.Fatalf("second page request %+v", reqs[1])
	}
}

func TestModelsUnauthorized(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, apiError(401, "authentication_error", "invalid x-api-key"))
	en := setup(t, api, config{})
	_, err := engine.Call[anthropic.ModelsResponse](t.Context(), en.e, anthropic.ModelsFunction, struct{}{})
	if !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("error %v, want forbidden", err)
	}
}

func TestJSONCallerGetsJSON(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, ok(sse(t, "text")))
	en := setup(t, api, config{})
	body := []byte(`{"model":"claude-opus-4-20250514","messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}]}`)
	reply, codec, err := en.e.TriggerRaw(context.Background(), anthropic.CompleteFunction, body, wire.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if codec.ContentType() != wire.JSON.ContentType() || !strings.Contains(string(reply), `"text":"Hello!"`) {
		t.Fatalf("reply %s in %s", reply, codec.ContentType())
	}
}

// TestHugeErrorBody: a broken or hostile gateway that answers an error
// status with an endless body does not make the provider read (and
// allocate) it: the call fails at once with the status's coded error, and
// the gateway could write little more than the socket buffers hold before
// the connection was dropped.
func TestHugeErrorBody(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		fn     string // stream, complete or models
		status int
		code   wire.Code // the function's error (complete, models)
		kind   agent.ErrorKind
	}{
		{name: "stream 500", fn: "stream", status: http.StatusInternalServerError, kind: agent.ErrorTransient},
		{name: "complete 400", fn: "complete", status: http.StatusBadRequest, code: wire.CodeInternal, kind: agent.ErrorPermanent},
		{name: "models 401", fn: "models", status: http.StatusUnauthorized, code: wire.CodeForbidden, kind: agent.ErrorAuthExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := newEndless()
			api := newFakeAPI(t, response{status: tc.status, body: `{"type":"error","error":{"type":"api_error","message":"`, endless: body})
			en := setup(t, api, config{opts: []anthropic.Option{anthropic.WithMaxRetries(0)}})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			req := anthropic.CompleteRequest{Model: "m", Messages: []agent.Message{agent.UserText("hi", 1)}}
			var err error
			switch tc.fn {
			case "stream":
				res := en.stream(t, userReq("hi"), nil)
				ev := last(res.Events)
				if res.err != nil || len(res.Events) != 1 || ev.Type != agent.ModelError || ev.Kind != tc.kind || !strings.Contains(ev.Error, "500") {
					t.Fatalf("events %+v, function error %v", res.Events, res.err)
				}
			case "complete":
				_, err = engine.Call[anthropic.CompleteResponse](ctx, en.e, anthropic.CompleteFunction, req)
			case "models":
				_, err = engine.Call[anthropic.ModelsResponse](ctx, en.e, anthropic.ModelsFunction, struct{}{})
			}
			if tc.code != "" {
				var werr *wire.Error
				if !errors.As(err, &werr) || werr.Code != tc.code || werr.Details["kind"] != string(tc.kind) {
					t.Fatalf("error %v, want code %s kind %s", err, tc.code, tc.kind)
				}
			}
			select {
			case <-body.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the server is still writing the error body")
			}
			if n := body.written.Load(); n >= 32<<20 {
				t.Fatalf("the server wrote %d MiB of the error body: the provider read it", n>>20)
			}
		})
	}
}
