package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
)

// apiErr builds the SDK's error for an HTTP status and a body.
func apiErr(t *testing.T, status int, body string, header map[string]string) error {
	t.Helper()
	e := &sdk.Error{StatusCode: status, Response: &http.Response{StatusCode: status, Header: http.Header{}}}
	for k, v := range header {
		e.Response.Header.Set(k, v)
	}
	if err := e.UnmarshalJSON([]byte(body)); err != nil {
		t.Fatal(err)
	}
	return e
}

func body(typ, msg string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name       string
		err        error
		kind       agent.ErrorKind
		retryAfter time.Duration
		text       string
	}{
		{"401", apiErr(t, 401, body("authentication_error", "invalid x-api-key"), nil), agent.ErrorAuthExpired, 0, "anthropic: 401 authentication_error: invalid x-api-key"},
		{"403", apiErr(t, 403, body("permission_error", "no"), nil), agent.ErrorAuthExpired, 0, ""},
		{"403 without type", apiErr(t, 403, `not json`, nil), agent.ErrorAuthExpired, 0, "anthropic: 403 http_error: Forbidden"},
		{"429 seconds", apiErr(t, 429, body("rate_limit_error", "slow"), map[string]string{"Retry-After": "7"}), agent.ErrorRateLimited, 7 * time.Second, ""},
		{"429 ms wins", apiErr(t, 429, body("rate_limit_error", "slow"), map[string]string{"Retry-After": "7", "retry-after-ms": "1500"}), agent.ErrorRateLimited, 1500 * time.Millisecond, ""},
		{"429 date", apiErr(t, 429, body("rate_limit_error", "slow"), map[string]string{"Retry-After": now.Add(30 * time.Second).UTC().Format(http.TimeFormat)}), agent.ErrorRateLimited, 30 * time.Second, ""},
		{"400 overflow", apiErr(t, 400, body("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"), nil), agent.ErrorContextOverflow, 0, ""},
		{"400 max_tokens overflow", apiErr(t, 400, body("invalid_request_error", "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000"), nil), agent.ErrorContextOverflow, 0, ""},
		{"413", apiErr(t, 413, body("request_too_large", "Request exceeds the maximum allowed number of bytes."), nil), agent.ErrorContextOverflow, 0, ""},
		{"400 other", apiErr(t, 400, body("invalid_request_error", "messages: text content blocks must be non-empty"), nil), agent.ErrorPermanent, 0, ""},
		{"404", apiErr(t, 404, body("not_found_error", "model: x"), nil), agent.ErrorPermanent, 0, ""},
		{"402 billing", apiErr(t, 402, body("billing_error", "credit balance too low"), nil), agent.ErrorPermanent, 0, ""},
		{"500", apiErr(t, 500, body("api_error", "Internal server error"), nil), agent.ErrorTransient, 0, ""},
		{"502 html", apiErr(t, 502, `<html>bad gateway</html>`, nil), agent.ErrorTransient, 0, "anthropic: 502 http_error: Bad Gateway"},
		{"529", apiErr(t, 529, body("overloaded_error", "Overloaded"), nil), agent.ErrorTransient, 0, ""},
		{"stream overloaded", apiErr(t, 200, body("overloaded_error", "Overloaded"), nil), agent.ErrorTransient, 0, "anthropic: overloaded_error: Overloaded"},
		{"stream rate limit", apiErr(t, 200, body("rate_limit_error", "slow"), nil), agent.ErrorRateLimited, 0, ""},
		{"stream invalid", apiErr(t, 200, body("invalid_request_error", "bad"), nil), agent.ErrorPermanent, 0, ""},
		{"stream overflow", apiErr(t, 200, body("invalid_request_error", "prompt is too long"), nil), agent.ErrorContextOverflow, 0, ""},
		{"stream unknown", apiErr(t, 200, `{}`, nil), agent.ErrorTransient, 0, ""},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, agent.ErrorTransient, 0, ""},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), agent.ErrorTransient, 0, ""},
		{"eof", io.ErrUnexpectedEOF, agent.ErrorTransient, 0, ""},
		{"malformed", malformed("x"), agent.ErrorPermanent, 0, "anthropic: malformed stream: x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := classify(tc.err, now)
			if f.kind != tc.kind || f.retryAfter != tc.retryAfter {
				t.Fatalf("classify = %s %v (%q), want %s %v", f.kind, f.retryAfter, f.text, tc.kind, tc.retryAfter)
			}
			if tc.text != "" && f.text != tc.text {
				t.Fatalf("text %q, want %q", f.text, tc.text)
			}
			if !errors.Is(f, tc.err) {
				t.Fatal("the failure does not wrap its cause")
			}
		})
	}
}

func TestFailureWireError(t *testing.T) {
	t.Parallel()
	for kind, code := range map[agent.ErrorKind]string{
		agent.ErrorRateLimited: "unavailable", agent.ErrorTransient: "unavailable", agent.ErrorAuthExpired: "forbidden",
		agent.ErrorContextOverflow: "invalid_payload", agent.ErrorPermanent: "internal",
	} {
		w := (&failure{kind: kind, text: "t", retryAfter: 1500 * time.Millisecond, status: 429, cause: errors.New("secret body")}).wireError()
		if string(w.Code) != code || w.Details["kind"] != string(kind) || w.Details["retry_after_ms"] != int64(1500) || w.Details["status"] != 429 {
			t.Errorf("%s: %+v", kind, w)
		}
		if strings.Contains(w.Error(), "secret") {
			t.Errorf("%s: the cause's text travels: %q", kind, w.Error())
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    map[string]string
		want time.Duration
		ok   bool
	}{
		{nil, 0, false},
		{map[string]string{"Retry-After": "3"}, 3 * time.Second, true},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond, true},
		{map[string]string{"Retry-After": " 2 "}, 2 * time.Second, true},
		{map[string]string{"Retry-After": "-1"}, 0, false},
		{map[string]string{"Retry-After": "1e300"}, 0, false},
		{map[string]string{"Retry-After": "soon"}, 0, false},
		{map[string]string{"Retry-After": "Wed, 01 Jan 2025 12:00:10 GMT"}, 10 * time.Second, true},
		{map[string]string{"Retry-After": "Wed, 01 Jan 2025 11:00:00 GMT"}, 0, true},
		{map[string]string{"retry-after-ms": "250"}, 250 * time.Millisecond, true},
		{map[string]string{"retry-after-ms": "x", "Retry-After": "1"}, time.Second, true},
		{map[string]string{"retry-after-ms": "-5"}, 0, false},
	} {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		got, ok := retryAfter(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%v) = %v, %v; want %v, %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
}

func TestToolUseID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"toolu_01T1x1fJ34qAmk2tNTrN7Up6", "call_abc-1", strings.Repeat("a", 128)} {
		if got := toolUseID(id); got != id {
			t.Errorf("toolUseID(%q) = %q, want it unchanged", id, got)
		}
	}
	a, b := toolUseID("call:1"), toolUseID("call;1")
	if a == b || !strings.HasPrefix(a, "call_1_") {
		t.Errorf("toolUseID(call:1) = %q, toolUseID(call;1) = %q: want distinct, readable ids", a, b)
	}
	if long := toolUseID(strings.Repeat("é", 200)); len(long) > maxToolUseID {
		t.Errorf("toolUseID of a long id is %d bytes", len(long))
	}
}

func TestModelMaxTokens(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]int64{
		"claude-opus-4-1-20250805": 32000, "claude-opus-4-20250514": 32000, "claude-opus-4-0": 32000,
		"claude-opus-4-5": 64000, "claude-sonnet-4-5-20250929": 64000, "claude-sonnet-4-20250514": 64000,
		"claude-haiku-4-5": 64000, "claude-3-7-sonnet-latest": 64000, "claude-3-5-haiku-latest": 8192,
		"claude-3-haiku-20240307": 4096, "claude-next": defaultMaxTokens, "": defaultMaxTokens,
	} {
		if got := modelMaxTokens(model); got != want {
			t.Errorf("modelMaxTokens(%q) = %d, want %d", model, got, want)
		}
	}
}

func TestAdaptiveThinking(t *testing.T) {
	t.Parallel()
	m, err := buildParams(agent.ProviderRequest{Model: "claude-opus-4-6", Messages: []agent.Message{agent.UserText("hi", 1)}, ThinkingLevel: ThinkingLow})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.params.MarshalJSON()
	if !strings.Contains(string(b), `"thinking":{"type":"adaptive"}`) || !strings.Contains(string(b), `"effort":"low"`) {
		t.Fatalf("body %s", b)
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		SettingBaseURL: "https://proxy.example/anthropic", SettingMaxRetries: "4", SettingBackoff: "250ms",
		SettingMaxRetryWait: "5s", SettingCredentialTTL: "1m", SettingIdleTimeout: "90s", SettingAPIKeyEnv: "CLAUDE_KEY",
		SettingCoalesce: "0",
	}
	opts, err := settingsOptions(good)
	if err != nil {
		t.Fatal(err)
	}
	o, err := buildOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	if o.baseURL != good[SettingBaseURL] || o.maxRetries != 4 || o.backoff != 250*time.Millisecond || o.maxRetryWait != 5*time.Second ||
		o.credentialTTL != time.Minute || o.idleTimeout != 90*time.Second || o.apiKeyEnv != "CLAUDE_KEY" || o.coalesce != 0 {
		t.Fatalf("options %+v", o)
	}
	for _, bad := range []map[string]string{
		{"colour": "blue"},
		{SettingMaxRetries: "many"},
		{SettingMaxRetries: "99"},
		{SettingBackoff: "soon"},
		{SettingBackoff: "-1s"},
		{SettingBaseURL: "ftp://x"},
		{SettingBaseURL: "https://user:pass@host"},
		{SettingAPIKeyEnv: ""},
		{SettingIdleTimeout: "0s"},
		{SettingCoalesce: "-1"},
		{SettingCoalesce: "1MB"},
	} {
		opts, err := settingsOptions(bad)
		if err == nil {
			_, err = buildOptions(opts)
		}
		if !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("settings %v: error %v, want ErrInvalidOption", bad, err)
		}
	}
}

// sseEvents writes data payloads as a stream body, each with the event
// line the API sends (the SDK skips events without one).
func sseEvents(data ...string) string {
	var b strings.Builder
	for _, d := range data {
		var v struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal([]byte(d), &v)
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", v.Type, d)
	}
	return b.String()
}

// events runs a stream body through read and a translator.
func events(t testing.TB, body string, names agent.ToolNames) ([]agent.ModelEvent, *translator, error) {
	t.Helper()
	evs, rerr := readAll(body)
	tr := newTranslator(names, "m", 1)
	var out []agent.ModelEvent
	for i := 0; !tr.done && i < len(evs); i++ {
		if err := tr.event(&evs[i], func(ev *agent.ModelEvent) error {
			if verr := ev.Validate(); verr != nil {
				return fmt.Errorf("invalid event %+v: %w", ev, verr)
			}
			out = append(out, *ev)
			return nil
		}); err != nil {
			return out, tr, err
		}
	}
	return out, tr, rerr
}

func TestTranslatorEdges(t *testing.T) {
	t.Parallel()
	const (
		textStart = `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`
		stop0     = `{"type":"content_block_stop","index":0}`
		msgStop   = `{"type":"message_stop"}`
	)
	for _, tc := range []struct {
		name, body string
		types      string
		err        string
	}{
		{
			name:  "no message_start",
			body:  sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"Hi"}}`, stop0, msgStop),
			types: "start text_start text_delta text_end done",
		},
		{
			name:  "block started twice",
			body:  sseEvents(textStart, textStart),
			types: "start text_start", err: "started twice",
		},
		{
			name: "stray delta and stop",
			body: sseEvents(`{"type":"message_start","message":{}}`,
				`{"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"x"}}`,
				`{"type":"content_block_stop","index":7}`, msgStop),
			types: "start done",
		},
		{
			name:  "tool input in the start block",
			body:  sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"a__b","input":{"x":1}}}`, stop0, msgStop),
			types: "start functioncall_start functioncall_end done",
		},
		{
			name:  "tool without a name",
			body:  sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":""}}`),
			types: "start", err: "has no name",
		},
		{
			name:  "tool with a bad id",
			body:  sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"a.b","name":"x"}}`),
			types: "start", err: "function call id",
		},
		{
			name: "input is an array",
			body: sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"x"}}`,
				`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"[1]"}}`, stop0,
				`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}`),
			types: "start functioncall_start functioncall_delta", err: "not a JSON object",
		},
		{
			name: "call cut at max_tokens is dropped",
			body: sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"x"}}`,
				`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": \"b"}}`, stop0,
				`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}`, msgStop),
			types: "start functioncall_start functioncall_delta usage stop done",
		},
		{
			name: "cut call with another stop reason",
			body: sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"x"}}`,
				`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": \"b"}}`, stop0,
				`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}`, msgStop),
			types: "start functioncall_start functioncall_delta", err: "not a JSON object",
		},
		{
			name: "cut call without a stop reason",
			body: sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"x"}}`,
				`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`, stop0, msgStop),
			types: "start functioncall_start functioncall_delta", err: "not a JSON object",
		},
		{
			name: "bad call before the last block at max_tokens",
			body: sseEvents(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"x"}}`,
				`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`, stop0,
				`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"Hi"}}`, `{"type":"content_block_stop","index":1}`,
				`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}`, msgStop),
			types: "start functioncall_start functioncall_delta text_start text_delta text_end", err: "not a JSON object",
		},
		{
			name: "mismatched delta",
			body: sseEvents(textStart, `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}`,
				`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`, stop0, msgStop),
			types: "start text_start text_end done",
		},
		{
			name: "two message_deltas",
			body: sseEvents(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}`,
				`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":2}}`, msgStop),
			types: "start usage stop usage done",
		},
		{
			name:  "events after message_stop",
			body:  sseEvents(msgStop, `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":"late"}}`),
			types: "start done",
		},
		{
			name:  "events without an event line are skipped by the SDK",
			body:  "data: " + textStart + "\n\n" + sseEvents(msgStop),
			types: "start done",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, tr, err := events(t, tc.body, agent.NewToolNames([]string{"a::b"}))
			var got []string
			for _, ev := range evs {
				got = append(got, string(ev.Type))
			}
			if strings.Join(got, " ") != tc.types {
				t.Errorf("events %v, want %s", got, tc.types)
			}
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			if tc.err != "" && !errors.Is(err, ErrMalformedStream) {
				t.Errorf("error %v does not wrap ErrMalformedStream", err)
			}
			if tr.done {
				if err := tr.final.Validate(); err != nil {
					t.Errorf("final message: %v", err)
				}
			}
		})
	}
}

// A call written out as text keeps markup in its arguments as it is.
func TestCallAsTextKeepsMarkup(t *testing.T) {
	got := callAsText(agent.Content{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "fs::write",
		Arguments: map[string]any{"text": "<b>&</b>"}})
	if want := `[called fs::write (call c1) with {"text":"<b>&</b>"}]`; got != want {
		t.Fatalf("callAsText = %s, want %s", got, want)
	}
}

// A tool input keeps integers past 2^53 exact (an int64 id the model
// wrote), whether it streamed or came whole with content_block_start.
func TestParseArgumentsExact(t *testing.T) {
	t.Parallel()
	args, err := parseArguments(`{"id":1234567890123456789,"u":18446744073709551615,"f":0.5}`, nil)
	if err != nil || args["id"] != int64(1234567890123456789) || args["u"] != uint64(18446744073709551615) || args["f"] != 0.5 {
		t.Fatalf("%#v, %v", args, err)
	}
	if _, err := parseArguments(`[1]`, nil); err == nil {
		t.Fatal("an array decoded as arguments")
	}
}
