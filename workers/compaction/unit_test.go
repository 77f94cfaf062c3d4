package compaction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

// tokenBytes inverts the estimate: t tokens are 4t bytes, and 4t bytes
// estimate t tokens.
func TestTokenBytes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ tokens, bytes int }{
		{-1, 0}, {0, 0}, {1, 4}, {200, 800}, {MaxKeepTokens * 2, MaxKeepTokens * 8},
	} {
		if got := tokenBytes(tt.tokens); got != tt.bytes {
			t.Errorf("tokenBytes(%d) = %d, want %d", tt.tokens, got, tt.bytes)
		}
		if tt.tokens > 0 && tokens(tt.bytes) != tt.tokens {
			t.Errorf("tokens(%d) = %d, want %d", tt.bytes, tokens(tt.bytes), tt.tokens)
		}
	}
	if tokenBytes(math.MaxInt/2) != math.MaxInt {
		t.Error("tokenBytes overflows")
	}
}

// The room for a summary is the entry limit, at most the server's max
// payload less the session tree's headroom, less the entry's other
// fields.
func TestSummaryRoom(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		maxEntry   int
		maxPayload int64
		want       int
	}{
		{DefaultMaxEntrySize, 1 << 20, DefaultMaxEntrySize - entryOverhead},
		{DefaultMaxEntrySize, 0, DefaultMaxEntrySize - entryOverhead},
		{DefaultMaxEntrySize, 64 << 10, 64<<10 - entryHeadroom - entryOverhead},
		{1 << 20, 8 << 20, 1<<20 - entryOverhead},
		{DefaultMaxEntrySize, 1500, 0},
	} {
		if got := summaryRoom(tt.maxEntry, tt.maxPayload); got != tt.want {
			t.Errorf("summaryRoom(%d, %d) = %d, want %d", tt.maxEntry, tt.maxPayload, got, tt.want)
		}
	}
}

// entrySummary fits the summary and its quote in the room: the quote is
// cut first, down to minEntryPart, then the summary; too little room is
// ErrEntryTooSmall.
func TestEntrySummary(t *testing.T) {
	t.Parallel()
	sum := func(n int) string { return "## Goal\n" + strings.Repeat("s", n-len("## Goal\n")-3) + "END" }
	quote := func(n int) string { return "Q" + strings.Repeat("é", (n-2)/2) + "Z" } // multi-byte
	sep := len(latestRequestSep)
	tests := []struct {
		name           string
		summary, quote string
		room           int
		wantSummary    int // bytes of summary kept (== len(summary): whole)
		wantQuote      int // bytes of quote kept
		err            error
	}{
		{"fits", sum(1000), quote(1000), 4000, 1000, 1000, nil},
		{"fits exactly", sum(1000), quote(1000), 1000 + sep + 1000, 1000, 1000, nil},
		{"no quote fits", sum(1000), "", 1000, 1000, 0, nil},
		{"quote cut", sum(1000), quote(10000), 4000, 1000, 4000 - 1000 - sep, nil},
		{"quote cut to its minimum", sum(3000), quote(10000), 3000 + sep + minEntryPart, 3000, minEntryPart, nil},
		{"then the summary", sum(10000), quote(10000), 2000, 2000 - sep - minEntryPart, minEntryPart, nil},
		{"short quote stays whole", sum(10000), quote(100), 2000, 2000 - sep - 100, 100, nil},
		{"no quote, summary cut", sum(10000), "", 2000, 2000, 0, nil},
		{"minimal entry", sum(10000), quote(10000), 2*minEntryPart + sep, minEntryPart, minEntryPart, nil},
		{"below minimal", sum(10000), quote(10000), 2*minEntryPart + sep - 1, 0, 0, ErrEntryTooSmall},
		{"no room", sum(10000), "", 0, 0, 0, ErrEntryTooSmall},
		{"no quote, below minimal", sum(10000), "", minEntryPart - 1, 0, 0, ErrEntryTooSmall},
	}
	for _, tt := range tests {
		got, err := entrySummary(tt.summary, tt.quote, tt.room)
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.err)
			continue
		}
		if err != nil {
			continue
		}
		if len(got) > tt.room || !utf8.ValidString(got) {
			t.Errorf("%s: %d bytes in a room of %d (UTF-8 %v)", tt.name, len(got), tt.room, utf8.ValidString(got))
		}
		s, q := stripLatestRequest(got), latestRequest(got)
		s = strings.TrimSpace(s)
		// A multi-byte character at a cut of the quote moves a byte
		// between the quote and the summary.
		if abs(len(s)-tt.wantSummary) > 1 || abs(len(q)-tt.wantQuote) > 1 {
			t.Errorf("%s: summary %d bytes (want %d), quote %d (want %d)", tt.name, len(s), tt.wantSummary, len(q), tt.wantQuote)
		}
		if whole := len(s) == len(tt.summary); whole != (s == tt.summary) {
			t.Errorf("%s: summary changed: %.60q", tt.name, s)
		}
		if !strings.HasPrefix(s, "## Goal") || !strings.HasSuffix(s, "END") {
			t.Errorf("%s: summary lost its head or tail: %.60q", tt.name, s)
		}
		if tt.quote != "" && (!strings.HasPrefix(q, "Q") || !strings.HasSuffix(q, "Z")) {
			t.Errorf("%s: quote lost its head or tail: %.60q", tt.name, q)
		}
	}
}

func abs(n int) int { return max(n, -n) }
