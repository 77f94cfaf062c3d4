package compaction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		m    agent.Message
		want int
	}{
		{"empty", agent.Message{Role: agent.RoleUser}, 0},
		{"one byte", agent.UserText("a", 0), 1},
		{"four bytes", agent.UserText("abcd", 0), 1},
		{"five bytes", agent.UserText("abcde", 0), 2},
		{"blocks add up before rounding", agent.Message{Role: agent.RoleUser, Content: []agent.Content{agent.Text("ab"), agent.Text("cd")}}, 1},
		{"thinking", agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentThinking, Text: "12345678"}}}, 2},
		{"call", agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{
			{Type: agent.ContentFunctionCall, ID: "c", FunctionID: "fs::read", Arguments: map[string]any{"path": "/a<b>"}}}}, 6}, // 8 + 16
		{"call without arguments", agent.Message{Role: agent.RoleAssistant, Content: []agent.Content{
			{Type: agent.ContentFunctionCall, ID: "c", FunctionID: "fs::ls"}}}, 2},
		{"image", agent.Message{Role: agent.RoleUser, Content: []agent.Content{{Type: agent.ContentImage, Mime: "image/png", Data: "AAAA"}}}, ImageTokens},
		{"result", agent.Message{Role: agent.RoleFunctionResult, FunctionCallID: "c", FunctionID: "f", Content: []agent.Content{agent.Text("123456789")}}, 3},
	}
	for _, tt := range tests {
		if got := MessageTokens(tt.m); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
	all := make([]agent.Message, len(tests))
	sum := 0
	for i, tt := range tests {
		all[i] = tt.m
		sum += tt.want
	}
	if got := EstimateTokens(all); got != sum {
		t.Fatalf("EstimateTokens = %d, want %d", got, sum)
	}
}

func TestUsableWindow(t *testing.T) {
	t.Parallel()
	o := defaultOptions()
	for _, tt := range []struct{ window, usable int }{
		{4000, 3000}, {200000, 200000 - 16384}, {65536, 65536 - 16384}, {64000, 48000},
	} {
		if got := o.usableWindow(tt.window); got != tt.usable {
			t.Errorf("window %d: usable %d, want %d", tt.window, got, tt.usable)
		}
	}
}

func TestShorten(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("a", 50) + strings.Repeat("é", 50) + strings.Repeat("z", 50)
	for _, n := range []int{0, 5, 40, 60, 100, 149, 200, 1000} {
		got := shorten(s, n)
		if len(got) > max(n, 0) && len(s) > n {
			t.Errorf("shorten(%d) is %d bytes", n, len(got))
		}
		if !utf8.ValidString(got) {
			t.Errorf("shorten(%d) = %q is not UTF-8", n, got)
		}
		if n >= len(s) && got != s {
			t.Errorf("shorten(%d) changed a short string", n)
		}
	}
	if got := shorten(s, 100); !strings.HasPrefix(got, "aaa") || !strings.HasSuffix(got, "zzz") || !strings.Contains(got, "bytes, middle omitted") {
		t.Errorf("shorten keeps head and tail: %q", got)
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	msgs := []agent.Message{
		agent.UserText("hello", 0),
		{Role: agent.RoleAssistant, Content: []agent.Content{
			{Type: agent.ContentThinking, Text: "hmm"}, agent.Text("let me look"),
			{Type: agent.ContentFunctionCall, ID: "c1", FunctionID: "fs::read", Arguments: map[string]any{"path": "/a<b>&"}},
			{Type: agent.ContentFunctionCall, ID: "c2", FunctionID: "fs::write", Arguments: map[string]any{"data": strings.Repeat("d", 100)}},
		}},
		{Role: agent.RoleFunctionResult, FunctionCallID: "c1", FunctionID: "fs::read", Content: []agent.Content{agent.Text(strings.Repeat("o", 100))}},
		{Role: agent.RoleFunctionResult, FunctionCallID: "c2", FunctionID: "fs::write", IsError: true, Content: []agent.Content{agent.Text("denied")}},
		{Role: agent.RoleUser, Content: []agent.Content{{Type: agent.ContentImage, Mime: "image/png", Data: "AAAA"}}},
	}
	got := strings.Join(renderMessages(msgs, 64), "")
	want := "[user]\nhello\n\n" +
		"[assistant]\n(thinking) hmm\nlet me look\n[call fs::read (c1)] {\"path\":\"/a<b>&\"}\n[call fs::write (c2)] [arguments of fs::write pruned: 111 bytes]\n\n" +
		"[function_result fs::read (c1)]\n[output of fs::read pruned: 100 bytes]\n\n" +
		"[function_result fs::write (c2) error]\ndenied\n\n" +
		"[user]\n[image image/png]\n\n"
	if got != want {
		t.Fatalf("render:\n%s\nwant:\n%s", got, want)
	}
}

// The summarizer never asks for more than the usable window: it packs
// messages into chunks, shortens a message too big for one, and folds
// each chunk into the running summary.
func TestSummarizerChunks(t *testing.T) {
	t.Parallel()
	const window = 1000
	var msgs []agent.Message
	for i := range 40 {
		msgs = append(msgs, agent.UserText(fmt.Sprintf("m%d %s", i, strings.Repeat("x", 300)), 0))
	}
	msgs = append(msgs, agent.UserText("huge "+strings.Repeat("y", 20000), 0))
	var calls []string
	s := summarizer{usable: window, maxTokens: 100, pruneBytes: 2048, complete: func(_ context.Context, system, user string, maxTokens int) (string, error) {
		if n := tokens(len(system)) + tokens(len(user)); n > window {
			return "", fmt.Errorf("request of %d tokens", n)
		}
		calls = append(calls, user)
		return fmt.Sprintf("summary %d", len(calls)), nil
	}}
	out, n, err := s.run(context.Background(), "earlier", msgs)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(calls) || n < 5 || out != fmt.Sprintf("summary %d", n) {
		t.Fatalf("%d calls, summary %q", n, out)
	}
	if !strings.HasPrefix(calls[0], "<previous-summary>\nearlier\n</previous-summary>") ||
		!strings.HasPrefix(calls[1], "<previous-summary>\nsummary 1\n</previous-summary>") {
		t.Fatalf("chunks are not folded:\n%.100s\n%.100s", calls[0], calls[1])
	}
	if !strings.Contains(calls[n-1], "middle omitted") {
		t.Fatal("the huge message was not shortened")
	}
	seen := strings.Join(calls, "")
	for i := range 40 {
		if !strings.Contains(seen, fmt.Sprintf("m%d ", i)) {
			t.Fatalf("message m%d never reached the summarizer", i)
		}
	}
	// A window too small for the prompt is an error, not a call.
	s.usable = 300
	if _, _, err := s.run(context.Background(), "", msgs); !errors.Is(err, ErrWindowTooSmall) {
		t.Fatalf("tiny window: %v", err)
	}
}

func TestLatestRequest(t *testing.T) {
	t.Parallel()
	s := withLatestRequest("## Goal\nx\n", "do it")
	if s != "## Goal\nx\n\n"+LatestRequestHeading+"\n\ndo it" || latestRequest(s) != "do it" {
		t.Fatalf("%q", s)
	}
	if again := withLatestRequest(s+"\n", "do more"); strings.Count(again, LatestRequestHeading) != 1 || latestRequest(again) != "do more" {
		t.Fatalf("%q", again)
	}
	if withLatestRequest(s, "") != "## Goal\nx" || latestRequest("## Goal") != "" {
		t.Fatal("no quote")
	}
}

func TestSchemasAreJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{compactRequestSchema, compactResponseSchema} {
		if !json.Valid([]byte(s)) {
			t.Fatalf("invalid schema %s", s)
		}
	}
}

func FuzzRender(f *testing.F) {
	f.Add("hello", "fs::read", "c1", `{"path":"/a"}`, 64)
	f.Add("\xff\xfe", "", "", `[]`, 0)
	f.Fuzz(func(t *testing.T, text, fn, id, args string, prune int) {
		var a map[string]any
		_ = json.Unmarshal([]byte(args), &a)
		msgs := []agent.Message{
			agent.UserText(text, 0),
			{Role: agent.RoleAssistant, Content: []agent.Content{{Type: agent.ContentThinking, Text: text},
				{Type: agent.ContentFunctionCall, ID: id, FunctionID: fn, Arguments: a}}},
			{Role: agent.RoleFunctionResult, FunctionCallID: id, FunctionID: fn, Content: []agent.Content{agent.Text(text)}},
		}
		if EstimateTokens(msgs) < 0 {
			t.Fatal("negative estimate")
		}
		for _, r := range renderMessages(msgs, prune) {
			for _, n := range []int{-1, 0, prune, len(r) / 2} {
				got := shorten(r, n)
				if len(r) > n && len(got) > max(n, 0) {
					t.Fatalf("shorten(%d) is %d bytes", n, len(got))
				}
				if utf8.ValidString(r) && !utf8.ValidString(got) {
					t.Fatalf("shorten broke UTF-8: %q", got)
				}
			}
		}
	})
}

// FuzzCompactRequest decodes arbitrary JSON and msgpack into a request:
// no panic, and a request that validates round-trips.
func FuzzCompactRequest(f *testing.F) {
	f.Add([]byte(`{"session_id":"s1","provider":"scripted","model":"tiny","reason":"overflow","wait":true,"keep_tokens":10}`))
	f.Add([]byte(`{"session_id":"a.b","provider":"x y","model":"","keep_tokens":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, codec := range []wire.Codec{wire.JSON, wire.Msgpack} {
			var r CompactRequest
			if codec.Unmarshal(data, &r) != nil {
				continue
			}
			err := r.Validate()
			if err == nil {
				b, merr := codec.Marshal(r)
				if merr != nil {
					t.Fatal(merr)
				}
				var back CompactRequest
				if err := codec.Unmarshal(b, &back); err != nil || back != r {
					t.Fatalf("round trip: %+v != %+v (%v)", back, r, err)
				}
			} else if !errors.Is(err, wire.ErrInvalidPayload) || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("validation error %v is not invalid_payload", err)
			}
		}
	})
}

// A huge window is still bounded by the bus's max payload.
func TestSummarizerPayloadBound(t *testing.T) {
	t.Parallel()
	var msgs []agent.Message
	for range 30 {
		msgs = append(msgs, agent.UserText(strings.Repeat("z", 1000), 0))
	}
	calls := 0
	s := summarizer{usable: 1 << 20, maxTokens: 100, pruneBytes: 2048, maxBytes: 8 << 10,
		complete: func(_ context.Context, _, user string, _ int) (string, error) {
			if len(user) > 8<<10 {
				return "", fmt.Errorf("user message of %d bytes", len(user))
			}
			calls++
			return "s", nil
		}}
	if _, n, err := s.run(context.Background(), "", msgs); err != nil || n < 4 || n != calls {
		t.Fatalf("%d calls: %v", n, err)
	}
}
