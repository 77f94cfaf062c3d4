package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
)

// readAll reads a stream body as [read] reads an API response: the
// decoded events, and the error that ended the stream if any.
func readAll(body string) ([]streamEvent, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://anthropic.test/v1/messages", nil)
	resp := &http.Response{
		StatusCode: 200, Request: req,
		Header: http.Header{"Content-Type": []string{"text/event-stream"}},
		Body:   io.NopCloser(strings.NewReader(body)),
	}
	items := make(chan item, itemBuffer)
	go read(context.Background(), resp, items)
	var evs []streamEvent
	var err error
	for it := range items {
		if it.err != nil {
			err = it.err
			continue
		}
		evs = append(evs, it.ev)
	}
	return evs, err
}

// FuzzStream feeds arbitrary stream bodies through the SDK's decoder and
// the translator: no panic, every event valid, indexes in order, thinking
// blocks well formed (checkThinking), and a finished stream's message
// valid.
func FuzzStream(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.sse"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("data: {\"type\":\"content_block_start\",\"index\":-1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"x\",\"name\":\"y\",\"input\":[1]}}\n\n")
	f.Add("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n")
	names := agent.NewToolNames([]string{"weather::get", "clock::now"})
	f.Fuzz(func(t *testing.T, body string) {
		evs, _ := readAll(body)
		tr := newTranslator(names, "m", 1)
		maxIndex := -1
		for i := 0; !tr.done && i < len(evs); i++ {
			err := tr.event(&evs[i], func(ev *agent.ModelEvent) error {
				if err := ev.Validate(); err != nil {
					t.Fatalf("invalid event %+v: %v", ev, err)
				}
				if ev.Index > maxIndex+1 {
					t.Fatalf("index %d skips past %d", ev.Index, maxIndex)
				}
				if ev.Type == agent.ModelThinkingEnd {
					if err := checkThinking(ev.Content); err != nil {
						t.Fatalf("thinking_end: %v", err)
					}
				}
				if ev.Message != nil {
					for i := range ev.Message.Content {
						if c := &ev.Message.Content[i]; c.Type == agent.ContentThinking {
							if err := checkThinking(c); err != nil {
								t.Fatalf("%s message: %v", ev.Type, err)
							}
						}
					}
				}
				maxIndex = max(maxIndex, ev.Index)
				return nil
			})
			if err != nil {
				if !errors.Is(err, ErrMalformedStream) {
					t.Fatalf("error %v is not ErrMalformedStream", err)
				}
				if p := tr.partial(err.Error()); p != nil {
					if err := p.Validate(); err != nil {
						t.Fatalf("partial message invalid: %v", err)
					}
				}
				return
			}
		}
		if tr.done {
			if err := tr.final.Validate(); err != nil {
				t.Fatalf("final message invalid: %v", err)
			}
		} else if p := tr.partial("x"); p != nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("partial message invalid: %v", err)
			}
		}
	})
}

// checkThinking checks a thinking block of a stream: a thinking block,
// either redacted (data, no text, no signature) or not (no data).
func checkThinking(c *agent.Content) error {
	switch {
	case c == nil || c.Type != agent.ContentThinking:
		return fmt.Errorf("not a thinking block: %+v", c)
	case c.Data != "" && (c.Text != "" || c.Signature != ""):
		return fmt.Errorf("redacted thinking with text or a signature: %+v", c)
	}
	return nil
}

// FuzzFastDelta checks the fast path against encoding/json: whenever it
// decodes, it decodes exactly what json.Unmarshal would.
func FuzzFastDelta(f *testing.F) {
	for _, s := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"location\":"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","Signature":"a","signature":"b\/c"}}`,
		`{"delta":{"text":"a"},"delta":{"type":"b"},"index":-0,"TYPE":"x"}`,
		`{"type":"content_block_delta","index":01,"delta":{}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\u00e9\ud83d\ude00 \ud800"}}`,
		"{\"type\":\"x\",\"text\":\"\xff\"}",
		`{"type":"message_stop"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast streamEvent
		if !fastDelta(data, &fast) {
			return
		}
		var std streamEvent
		if err := json.Unmarshal(data, &std); err != nil {
			t.Fatalf("fast path decoded what encoding/json refuses (%v): %q", err, data)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("fast %+v, encoding/json %+v: %q", fast, std, data)
		}
	})
}

// transcriptFrom builds a transcript and a tool list from fuzz bytes:
// every byte picks the next thing (role, block kind, id from a small pool
// that has duplicates and ids the API refuses, empty texts...).
func transcriptFrom(data []byte) ([]agent.Message, []agent.Tool, string) {
	ids := []string{"toolu_1", "toolu_2", "call:3", "toolu_1", "x y", strings.Repeat("z", 130), "toolu_5"}
	fns := []string{"math::add", "fs::read", "math__add", "a::b::c", "weird name!"}
	texts := []string{"", "hello", "ünïcode", " "}
	levels := []string{"", "off", "low", "medium", "high"}
	providers := []string{"anthropic", "", "openai"}
	thinking := []agent.Content{
		{Type: agent.ContentThinking, Text: "hmm"},                    // unsigned
		{Type: agent.ContentThinking, Text: "hmm", Signature: "EqQB"}, // signed
		{Type: agent.ContentThinking, Signature: "EqQB"},              // signed, no text shown
		{Type: agent.ContentThinking, Data: "EmwKAhgB"},               // redacted
	}
	pos := 0
	next := func() int {
		if pos >= len(data) {
			return 0
		}
		pos++
		return int(data[pos-1])
	}
	var tools []agent.Tool
	for n := next() % 4; n > 0; n-- {
		tools = append(tools, agent.Tool{FunctionID: fns[next()%len(fns)], InputSchema: map[string]any{"type": "object"}})
	}
	level := levels[next()%len(levels)]
	var msgs []agent.Message
	for pos < len(data) && len(msgs) < 40 {
		switch next() % 3 {
		case 0:
			m := agent.Message{Role: agent.RoleUser}
			for n := next()%3 + 1; n > 0; n-- {
				if next()%4 == 0 {
					m.Content = append(m.Content, agent.Content{Type: agent.ContentImage, Mime: []string{"image/png", "image/tiff", "IMAGE/JPEG; q=1"}[next()%3], Data: "AAAA"})
				} else {
					m.Content = append(m.Content, agent.Text(texts[next()%len(texts)]))
				}
			}
			msgs = append(msgs, m)
		case 1:
			m := agent.Message{Role: agent.RoleAssistant, Provider: providers[next()%len(providers)]}
			seen := map[string]bool{}
			for n := next() % 4; n > 0; n-- {
				switch next() % 3 {
				case 0:
					m.Content = append(m.Content, agent.Text(texts[next()%len(texts)]))
				case 1:
					m.Content = append(m.Content, thinking[next()%len(thinking)])
				default:
					id := ids[next()%len(ids)]
					if !seen[id] {
						seen[id] = true
						var args map[string]any
						if next()%2 == 0 {
							args = map[string]any{"n": float64(next())}
						}
						m.Content = append(m.Content, agent.Content{Type: agent.ContentFunctionCall, ID: id, FunctionID: fns[next()%len(fns)], Arguments: args})
					}
				}
			}
			msgs = append(msgs, m)
		default:
			msgs = append(msgs, agent.Message{
				Role: agent.RoleFunctionResult, FunctionCallID: ids[next()%len(ids)], FunctionID: fns[next()%len(fns)],
				Content: []agent.Content{agent.Text(texts[next()%len(texts)])}, IsError: next()%2 == 0,
			})
		}
	}
	return msgs, tools, level
}

// FuzzTranscript maps random transcripts: never a panic, and every request
// that comes out is one the Messages API accepts (checkRequest).
func FuzzTranscript(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 4, 0, 1, 0, 1, 3, 2, 2, 0, 1, 0, 2, 0, 0, 0, 1})
	f.Add([]byte{1, 1, 1, 2, 2, 2, 3, 2, 1, 1, 2, 1, 0, 2, 2, 2, 3, 0, 1, 1, 2, 6, 1, 1})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice: the quick brown fox"))
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, tools, level := transcriptFrom(data)
		for _, m := range msgs {
			if m.Validate() != nil {
				return // the handler refuses these before mapping
			}
		}
		req := agent.ProviderRequest{Model: "claude-sonnet-4-5", Messages: msgs, Tools: tools, ThinkingLevel: level, SystemPrompt: "s"}
		m, err := buildParams(req)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not ErrInvalidRequest", err)
			}
			return
		}
		body, err := m.params.MarshalJSON()
		if err != nil {
			t.Fatalf("params do not encode: %v", err)
		}
		if err := checkRequest(body); err != nil {
			t.Fatalf("%v\nrequest: %s", err, body)
		}
	})
}

var (
	toolIDRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

// checkRequest checks what the Messages API requires of a request body:
// alternating roles starting with user, no empty message or text block,
// tool names and ids of the right alphabet, unique tool_use ids, every
// tool_use answered by a tool_result at the head of the next user message
// (in order) and no other tool_result, no tool block without tools,
// thinking blocks only in assistant messages, signed (redacted ones with
// data) and never last, and a thinking budget below max_tokens; a request
// that continues a tool loop with thinking on starts its last assistant
// message with thinking.
func checkRequest(body []byte) error {
	var r struct {
		MaxTokens int64 `json:"max_tokens"`
		Messages  []struct {
			Role    string           `json:"role"`
			Content []map[string]any `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"input_schema"`
		} `json:"tools"`
		Thinking *struct {
			Type         string `json:"type"`
			BudgetTokens int64  `json:"budget_tokens"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return err
	}
	if r.MaxTokens < 1 {
		return fmt.Errorf("max_tokens %d", r.MaxTokens)
	}
	names := map[string]bool{}
	for _, tool := range r.Tools {
		if !toolNameRE.MatchString(tool.Name) || names[tool.Name] {
			return fmt.Errorf("tool name %q invalid or repeated", tool.Name)
		}
		names[tool.Name] = true
		if tool.InputSchema["type"] != "object" {
			return fmt.Errorf("tool %s: input_schema %v", tool.Name, tool.InputSchema)
		}
	}
	if len(r.Messages) == 0 || r.Messages[0].Role != "user" {
		return errors.New("the first message is not a user message")
	}
	seenIDs := map[string]bool{}
	uses, results := 0, 0
	lastAssistantCalls, lastAssistantThinks := false, false
	for i, m := range r.Messages {
		if i > 0 && m.Role == r.Messages[i-1].Role {
			return fmt.Errorf("messages %d and %d are both %s", i-1, i, m.Role)
		}
		if len(m.Content) == 0 {
			return fmt.Errorf("message %d is empty", i)
		}
		var calls []string
		for j, b := range m.Content {
			switch b["type"] {
			case "text":
				if s, _ := b["text"].(string); s == "" {
					return fmt.Errorf("message %d block %d: empty text", i, j)
				}
			case "image":
				src, _ := b["source"].(map[string]any)
				if mt, ok := mediaType(fmt.Sprint(src["media_type"])); !ok || mt != src["media_type"] || src["type"] != "base64" {
					return fmt.Errorf("message %d block %d: image source %v", i, j, src)
				}
			case "tool_use":
				uses++
				id, _ := b["id"].(string)
				name, _ := b["name"].(string)
				if m.Role != "assistant" || !toolIDRE.MatchString(id) || !toolNameRE.MatchString(name) || seenIDs[id] {
					return fmt.Errorf("message %d block %d: tool_use %v", i, j, b)
				}
				if _, ok := b["input"].(map[string]any); !ok {
					return fmt.Errorf("message %d block %d: input %v", i, j, b["input"])
				}
				seenIDs[id] = true
				calls = append(calls, id)
			case "tool_result":
				results++
			case "thinking":
				sig, _ := b["signature"].(string)
				if _, ok := b["thinking"].(string); !ok || sig == "" || m.Role != "assistant" || j == len(m.Content)-1 {
					return fmt.Errorf("message %d block %d: thinking %v", i, j, b)
				}
			case "redacted_thinking":
				if data, _ := b["data"].(string); data == "" || m.Role != "assistant" || j == len(m.Content)-1 {
					return fmt.Errorf("message %d block %d: redacted_thinking %v", i, j, b)
				}
			default:
				return fmt.Errorf("message %d block %d: type %v", i, j, b["type"])
			}
		}
		if m.Role == "assistant" {
			lastAssistantCalls = len(calls) > 0
			lastAssistantThinks = m.Content[0]["type"] == "thinking" || m.Content[0]["type"] == "redacted_thinking"
		}
		if len(calls) == 0 {
			continue
		}
		if i+1 >= len(r.Messages) {
			return fmt.Errorf("message %d has calls and nothing after it", i)
		}
		next := r.Messages[i+1].Content
		if len(next) < len(calls) {
			return fmt.Errorf("message %d: %d calls, %d blocks after", i, len(calls), len(next))
		}
		for k, id := range calls {
			if next[k]["type"] != "tool_result" || next[k]["tool_use_id"] != id {
				return fmt.Errorf("message %d: call %s is not answered at block %d: %v", i, id, k, next[k])
			}
		}
		for _, b := range next[len(calls):] {
			if b["type"] == "tool_result" {
				return fmt.Errorf("message %d: a tool_result after the answers", i+1)
			}
		}
	}
	if uses != results {
		return fmt.Errorf("%d tool_use blocks, %d tool_result blocks", uses, results)
	}
	if len(r.Tools) == 0 && uses > 0 {
		return errors.New("tool blocks in a request without tools")
	}
	if th := r.Thinking; th != nil && th.Type == "enabled" {
		if th.BudgetTokens < 1024 || th.BudgetTokens >= r.MaxTokens {
			return fmt.Errorf("budget %d, max_tokens %d", th.BudgetTokens, r.MaxTokens)
		}
	}
	if th := r.Thinking; th != nil && th.Type != "disabled" && lastAssistantCalls && !lastAssistantThinks {
		return errors.New("thinking on while continuing a tool loop whose last assistant message does not start with thinking")
	}
	return nil
}

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "1", "0.25", "-3", "NaN", "Inf", "1e400", "Wed, 21 Oct 2015 07:28:00 GMT", "Mon, 02 Jan 3000 15:04:05 GMT"} {
		f.Add(s, s)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ra, ms string) {
		h := http.Header{}
		h.Set("Retry-After", ra)
		h.Set("retry-after-ms", ms)
		d, ok := retryAfter(h, now)
		if d < 0 || d > maxRetryAfter || !ok && d != 0 {
			t.Fatalf("retryAfter(%q, %q) = %v, %v", ra, ms, d, ok)
		}
	})
}

func FuzzToolUseID(f *testing.F) {
	for _, s := range []string{"", "toolu_01", "call:1", "a.b*c>d", strings.Repeat("x", 200), "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		got := toolUseID(id)
		if !toolIDRE.MatchString(got) {
			t.Fatalf("toolUseID(%q) = %q", id, got)
		}
		if toolIDRE.MatchString(id) && got != id {
			t.Fatalf("toolUseID(%q) = %q, want it unchanged", id, got)
		}
		if toolUseID(id) != got {
			t.Fatal("not deterministic")
		}
	})
}
