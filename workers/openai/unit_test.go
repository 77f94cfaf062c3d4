package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
)

func TestStatusKind(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		body   string
		want   agent.ErrorKind
	}{
		{401, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`, agent.ErrorAuthExpired},
		{403, `{}`, agent.ErrorAuthExpired},
		{429, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, agent.ErrorRateLimited},
		{429, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`, agent.ErrorPermanent},
		{400, `{"error":{"message":"x","code":"context_length_exceeded"}}`, agent.ErrorContextOverflow},
		{400, `{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, agent.ErrorContextOverflow},
		{400, `{"error":{"message":"Invalid 'messages[1].content'"}}`, agent.ErrorPermanent},
		{422, `{"detail":"bad"}`, agent.ErrorPermanent},
		{413, ``, agent.ErrorContextOverflow},
		{404, `{"error":"model not found"}`, agent.ErrorPermanent},
		{408, ``, agent.ErrorTransient},
		{409, ``, agent.ErrorTransient},
		{500, ``, agent.ErrorTransient},
		{502, `<html>bad gateway</html>`, agent.ErrorTransient},
		{529, `{"error":{"type":"overloaded_error"}}`, agent.ErrorTransient},
		{418, ``, agent.ErrorPermanent},
	}
	for _, tc := range cases {
		e := parseErrorBody([]byte(tc.body))
		if got := statusKind(tc.status, &e); got != tc.want {
			t.Errorf("%d %s: %s, want %s", tc.status, tc.body, got, tc.want)
		}
	}
}

func TestStreamErrorKind(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body string
		want agent.ErrorKind
	}{
		{`{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`, agent.ErrorTransient},
		{`{"error":{"message":"Rate limit","type":"rate_limit_error"}}`, agent.ErrorRateLimited},
		{`{"error":{"message":"max context","type":"invalid_request_error","code":"context_length_exceeded"}}`, agent.ErrorContextOverflow},
		{`{"error":{"message":"bad","type":"invalid_request_error"}}`, agent.ErrorPermanent},
		{`{"error":{"object":"error","message":"boom","type":"InternalServerError","code":500}}`, agent.ErrorTransient},
		{`{"error":{"message":"nope","type":"BadRequestError","code":400}}`, agent.ErrorPermanent},
		{`{"error":{"message":"key revoked","type":"authentication_error"}}`, agent.ErrorAuthExpired},
		{`{"error":"something"}`, agent.ErrorTransient},
	}
	for _, tc := range cases {
		e := parseErrorBody([]byte(tc.body))
		if got := streamErrorKind(&e); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.body, got, tc.want)
		}
	}
}

func TestRetryAfterHint(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		h    map[string]string
		want time.Duration
	}{
		{nil, 0},
		{map[string]string{"Retry-After": "3"}, 3 * time.Second},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"Retry-After": "0"}, 0},
		{map[string]string{"Retry-After": "-4"}, 0},
		{map[string]string{"Retry-After": "Thu, 01 May 2025 12:00:07 GMT"}, 7 * time.Second},
		{map[string]string{"Retry-After": "Thu, 01 May 2025 11:00:00 GMT"}, 0},
		{map[string]string{"Retry-After": "soon"}, 0},
		{map[string]string{"Retry-After": "1e400"}, 0},
		{map[string]string{"Retry-After": "99999999999"}, maxHint},
		{map[string]string{"retry-after-ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
		{map[string]string{"retry-after-ms": "junk", "Retry-After": "9"}, 9 * time.Second},
	}
	for _, tc := range cases {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		if got := retryAfter(h, now); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.h, got, tc.want)
		}
	}
}

func TestSanitizeCallID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"call_abc":                   "call_abc",
		"chatcmpl-tool-1.2":          "chatcmpl-tool-1_2",
		"a/b*c>d e\tf":               "a_b_c_d_e_f",
		"\xff\xfe":                   "_",
		strings.Repeat("é", 100):     strings.Repeat("é", 64),
		"":                           "",
		"functions.get_weather:0":    "functions_get_weather:0",
		"toolu_01A09q90qw90lq917835": "toolu_01A09q90qw90lq917835",
	} {
		got := sanitizeCallID(in)
		if got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
		if got != "" && agent.ValidateCallID(got) != nil {
			t.Errorf("%q: %q is not a valid call id", in, got)
		}
	}
	a := &assembler{}
	ids := map[string]bool{}
	for range 3 {
		id := a.callID("dup")
		if ids[id] {
			t.Fatalf("id %q given twice", id)
		}
		ids[id] = true
	}
	if id := a.callID(""); !strings.HasPrefix(id, "call_") || agent.ValidateCallID(id) != nil {
		t.Fatalf("generated id %q", id)
	}
}

func TestParseArguments(t *testing.T) {
	t.Parallel()
	for in, ok := range map[string]bool{
		"": true, "  ": true, "null": true, "{}": true, `{"a":[1,{"b":null}]}`: true,
		"[]": false, "3": false, `"s"`: false, `{"a":`: false, "{} {}": false,
	} {
		args, err := parseArguments(in)
		if (err == nil) != ok || (ok && args == nil) {
			t.Errorf("%q: %v, %v", in, args, err)
		}
	}
}

func TestReasoningEffort(t *testing.T) {
	t.Parallel()
	auto := options{reasoning: ReasoningAuto}
	always := options{reasoning: ReasoningAlways}
	never := options{reasoning: ReasoningNever}
	cases := []struct {
		o          options
		model, lvl string
		want       string
	}{
		{auto, "o3-mini", "high", "high"},
		{auto, "gpt-5-mini", "low", "low"},
		{auto, "openai/gpt-oss-120b", "medium", "medium"},
		{auto, "O4-MINI", "low", "low"},
		{auto, "gpt-4o", "high", ""},
		{auto, "o3", "off", ""},
		{auto, "o3", "", ""},
		{always, "llama3", "low", "low"},
		{never, "o3", "high", ""},
	}
	for _, tc := range cases {
		if got := tc.o.reasoningEffort(tc.model, tc.lvl); got != tc.want {
			t.Errorf("%s %s %s: %q, want %q", tc.o.reasoning, tc.model, tc.lvl, got, tc.want)
		}
	}
}

func TestUsageCached(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]agent.Usage{
		`{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":60}}`: {InputTokens: 40, OutputTokens: 7, CacheReadTokens: 60},
		`{"prompt_tokens":100,"completion_tokens":7,"prompt_cache_hit_tokens":30}`:                 {InputTokens: 70, OutputTokens: 7, CacheReadTokens: 30},
		`{"prompt_tokens":100,"completion_tokens":7,"cached_tokens":10}`:                           {InputTokens: 90, OutputTokens: 7, CacheReadTokens: 10},
		`{"prompt_tokens":5,"completion_tokens":1,"cached_tokens":10}`:                             {InputTokens: 0, OutputTokens: 1, CacheReadTokens: 10},
		// Negative counts (a broken server's) count as none.
		`{"prompt_tokens":100,"completion_tokens":-7,"cached_tokens":-10}`: {InputTokens: 100, OutputTokens: 0, CacheReadTokens: 0},
		`{"prompt_tokens":-100,"completion_tokens":7}`:                     {InputTokens: 0, OutputTokens: 7, CacheReadTokens: 0},
	} {
		var u chunkUsage
		if err := json.Unmarshal([]byte(body), &u); err != nil {
			t.Fatal(err)
		}
		a := &assembler{}
		a.setUsage(&u)
		if a.usage != want {
			t.Errorf("%s: %+v, want %+v", body, a.usage, want)
		}
	}
}

// feed runs chunks (JSON) through an assembler and returns its events, the
// final message and the failure, if any.
func feed(t *testing.T, chunks ...string) ([]agent.ModelEvent, *agent.Message, *failure) {
	t.Helper()
	var events []agent.ModelEvent
	a := newAssembler("openai", "m", 1, agent.NewToolNames([]string{"math::add"}), slog.New(slog.DiscardHandler), func(ev *agent.ModelEvent) error {
		events = append(events, *ev)
		return nil
	})
	for _, s := range chunks {
		var c chunk
		if err := decodeChunk([]byte(s), &c); err != nil {
			t.Fatal(err)
		}
		if err := a.chunk(&c); err != nil {
			var f *failure
			if !errors.As(err, &f) {
				t.Fatal(err)
			}
			return events, nil, f
		}
	}
	if !a.done {
		return events, nil, nil
	}
	msg, err := a.complete()
	if err != nil {
		t.Fatal(err)
	}
	return events, msg, nil
}

func TestFinishReasons(t *testing.T) {
	t.Parallel()
	const text = `{"choices":[{"index":0,"delta":{"content":"hi"}}]}`
	const call = `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"math__add","arguments":"{}"}}]}}]}`
	fin := func(r string) string { return `{"choices":[{"index":0,"delta":{},"finish_reason":"` + r + `"}]}` }
	cases := []struct {
		chunks []string
		want   agent.StopReason
	}{
		{[]string{text, fin("stop")}, agent.StopEnd},
		{[]string{text, fin("length")}, agent.StopLength},
		{[]string{text, fin("content_filter")}, agent.StopEnd},
		{[]string{text, fin("eos")}, agent.StopEnd},
		{[]string{text, fin("tool_calls")}, agent.StopEnd},
		{[]string{call, fin("tool_calls")}, agent.StopFunctionCall},
		{[]string{call, fin("function_call")}, agent.StopFunctionCall},
		{[]string{call, fin("stop")}, agent.StopFunctionCall},
		{[]string{call, fin("length")}, agent.StopLength},
		{[]string{fin("stop")}, agent.StopEnd},
	}
	for i, tc := range cases {
		_, msg, f := feed(t, tc.chunks...)
		if f != nil || msg == nil || msg.StopReason != tc.want {
			t.Errorf("case %d: message %+v, failure %v, want stop %s", i, msg, f, tc.want)
		}
	}
}

func TestAnswerFailures(t *testing.T) {
	t.Parallel()
	fin := `{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
	// A call that never got a name.
	_, _, f := feed(t, `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"arguments":"{}"}}]}}]}`, fin)
	if f == nil || f.kind != agent.ErrorPermanent || !strings.Contains(f.text, "no function name") {
		t.Fatalf("nameless call: %v", f)
	}
	// Arguments that are not an object.
	_, _, f = feed(t, `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"math__add","arguments":"[1]"}}]}}]}`, fin)
	if f == nil || f.kind != agent.ErrorPermanent {
		t.Fatalf("array arguments: %v", f)
	}
	// Too many calls.
	var chunks []string
	for i := range maxCalls + 1 {
		chunks = append(chunks, fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":%d,"function":{"name":"math__add"}}]}}]}`, i))
	}
	_, _, f = feed(t, chunks...)
	if f == nil || f.kind != agent.ErrorPermanent {
		t.Fatalf("too many calls: %v", f)
	}
	// Arguments that come before the name go out in one delta at start.
	events, msg, f := feed(t,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"arguments":"{\"a\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"math__add","arguments":"1}"}}]}}]}`, fin)
	if f != nil || len(msg.FunctionCalls()) != 1 || events[2].Type != agent.ModelFunctionCallDelta || events[2].Delta != `{"a":1}` {
		t.Fatalf("late name: %v %+v %+v", f, msg, events)
	}
	// Deltas of other choices and after the finish are ignored.
	_, msg, _ = feed(t, `{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"mine"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"delta":{"content":"late"}}]}`)
	if len(msg.Content) != 1 || msg.Content[0].Text != "mine!" {
		t.Fatalf("message %+v", msg)
	}
}

// The arguments of the model's earlier calls go back as the JSON string
// the API wants, markup in them as it is (no "\u003c" escapes).
func TestArgumentsJSONKeepsMarkup(t *testing.T) {
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{nil, "{}"},
		{map[string]any{"html": "<p>a & b</p>"}, `{"html":"<p>a & b</p>"}`},
	} {
		if got := argumentsJSON(c.args); got != c.want {
			t.Errorf("argumentsJSON(%v) = %s, want %s", c.args, got, c.want)
		}
	}
}

// Arguments keep integers past 2^53 exact (an int64 id the model wrote).
func TestParseArgumentsExact(t *testing.T) {
	t.Parallel()
	args, err := parseArguments(`{"id":1234567890123456789,"u":18446744073709551615,"f":0.5}`)
	if err != nil || args["id"] != int64(1234567890123456789) || args["u"] != uint64(18446744073709551615) || args["f"] != 0.5 {
		t.Fatalf("%#v, %v", args, err)
	}
}
