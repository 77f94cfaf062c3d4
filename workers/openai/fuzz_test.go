package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/iii-on-nats/iii/agent"
)

// genReader draws a transcript's choices from fuzz bytes.
type genReader struct {
	b []byte
	i int
}

func (g *genReader) byte() byte {
	if g.i >= len(g.b) {
		return 0
	}
	c := g.b[g.i]
	g.i++
	return c
}

func (g *genReader) str() string {
	n := int(g.byte() % 12)
	var s []byte
	for range n {
		s = append(s, g.byte())
	}
	return string(s)
}

// transcriptFrom builds a request from fuzz bytes: random roles, blocks,
// call ids shared (or not) between calls and results, odd tool names.
func transcriptFrom(data []byte) agent.ProviderRequest {
	g := &genReader{b: data}
	ids := []string{"c1", "c2", "c3", "call_x", g.str()}
	fns := []string{"math::add", "fs::read/v2", "x__y", "x::y", g.str()}
	req := agent.ProviderRequest{Model: "gpt-4o", SystemPrompt: g.str()}
	for range int(g.byte() % 5) {
		req.Tools = append(req.Tools, agent.Tool{FunctionID: fns[g.byte()%5], Description: g.str()})
	}
	for range int(g.byte()%12) + 1 {
		var m agent.Message
		switch g.byte() % 3 {
		case 0:
			m.Role = agent.RoleUser
			for range int(g.byte()%3) + 1 {
				if g.byte()%4 == 0 {
					m.Content = append(m.Content, agent.Content{Type: agent.ContentImage, Mime: "image/png", Data: "AA" + g.str()})
				} else {
					m.Content = append(m.Content, agent.Text(g.str()))
				}
			}
		case 1:
			m.Role = agent.RoleAssistant
			for range int(g.byte() % 5) {
				switch g.byte() % 4 {
				case 0:
					m.Content = append(m.Content, agent.Text(g.str()))
				case 1:
					m.Content = append(m.Content, agent.Content{Type: agent.ContentThinking, Text: g.str()})
				default:
					m.Content = append(m.Content, agent.Content{Type: agent.ContentFunctionCall, ID: ids[g.byte()%5], FunctionID: fns[g.byte()%5],
						Arguments: map[string]any{"k": g.str()}})
				}
			}
		default:
			m.Role = agent.RoleFunctionResult
			m.FunctionCallID, m.FunctionID, m.IsError = ids[g.byte()%5], fns[g.byte()%5], g.byte()%2 == 0
			m.Content = []agent.Content{agent.Text(g.str())}
			if g.byte()%3 == 0 {
				m.Content = append(m.Content, agent.Content{Type: agent.ContentImage, Mime: "image/gif", Data: "R0"})
			}
		}
		req.Messages = append(req.Messages, m)
	}
	return req
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// FuzzMapMessages: any valid transcript maps onto a request the API
// accepts: it encodes, every tool message answers a call of the assistant
// message right before its run of tool messages, every call is answered
// exactly once, and every tool name is vendor-safe.
func FuzzMapMessages(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x05\x01\x02\x03\x00\x01\x04\x02\x02\x02\x00\x01\x02\x01\x00\x02\x00\x01\x03"))
	f.Add(bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, 20))
	o, err := buildOptions(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := transcriptFrom(data)
		if ValidateRequest(req, false) != nil {
			return
		}
		params := o.buildParams(req, toolNames(req))
		raw, err := json.Marshal(params)
		if err != nil {
			t.Fatalf("params do not encode: %v", err)
		}
		var body struct {
			Messages []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
				ToolCalls  []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, tool := range body.Tools {
			if !toolNameRE.MatchString(tool.Function.Name) || names[tool.Function.Name] {
				t.Fatalf("tool name %q invalid or repeated", tool.Function.Name)
			}
			names[tool.Function.Name] = true
		}
		var open map[string]bool // calls of the last assistant message not answered yet
		inRun := false
		for i, m := range body.Messages {
			switch m.Role {
			case "system", "user":
				if len(open) > 0 {
					t.Fatalf("message %d (%s) while calls %v are unanswered", i, m.Role, open)
				}
				inRun = false
			case "assistant":
				if len(open) > 0 {
					t.Fatalf("assistant message %d while calls %v are unanswered", i, open)
				}
				open = map[string]bool{}
				for _, c := range m.ToolCalls {
					if !toolNameRE.MatchString(c.Function.Name) || !json.Valid([]byte(c.Function.Arguments)) {
						t.Fatalf("call %+v", c)
					}
					open[c.ID] = true
				}
				inRun = len(open) > 0
			case "tool":
				if !inRun || !open[m.ToolCallID] {
					t.Fatalf("tool message %d answers %q, which is not open (%v)", i, m.ToolCallID, open)
				}
				delete(open, m.ToolCallID)
			default:
				t.Fatalf("role %q", m.Role)
			}
		}
		if len(open) > 0 {
			t.Fatalf("calls %v left unanswered", open)
		}
	})
}

// FuzzAssembler feeds arbitrary chunk sequences (one JSON chunk per line)
// to the assembler: it never panics, every event it emits is valid, and a
// finished answer's done message is valid and matches its events.
func FuzzAssembler(f *testing.F) {
	for _, name := range []string{"text", "parallel_tools", "thinking_deepseek", "thinking_ollama", "kimi", "length_cut_call", "midstream_error"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".sse"))
		if err != nil {
			f.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("data: "), nil)
		f.Add(bytes.ReplaceAll(b, []byte("\n\n"), []byte("\n")))
	}
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":5,"function":{"arguments":"{}"}},{"index":5,"function":{"name":"a b"}}]},"finish_reason":"stop"}]}`))
	// Parallel calls that share index 0, told apart by their ids (ollama).
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"math__add","arguments":"{\"a\":"}},{"index":0,"id":"c2","function":{"name":"weather__get","arguments":"{}"}}]}}]}` + "\n" +
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"math__add","arguments":"1}"}}]},"finish_reason":"tool_calls"}]}`))
	names := agent.NewToolNames([]string{"weather::get", "math::add"})
	f.Fuzz(func(t *testing.T, data []byte) {
		var events []agent.ModelEvent
		a := newAssembler("openai", "m", 1, names, slog.New(slog.DiscardHandler), func(ev *agent.ModelEvent) error {
			if err := ev.Validate(); err != nil {
				t.Fatalf("invalid event %+v: %v", ev, err)
			}
			events = append(events, *ev)
			return nil
		})
		var fail *failure
		var c chunk
		for _, line := range bytes.Split(data, []byte("\n")) {
			if decodeChunk(line, &c) != nil || c.Error != "" {
				continue
			}
			if err := a.chunk(&c); err != nil {
				if !errors.As(err, &fail) {
					t.Fatalf("chunk error %v", err)
				}
				break
			}
		}
		if fail == nil && a.done {
			msg, err := a.complete()
			if err != nil {
				t.Fatal(err)
			}
			if err := msg.Validate(); err != nil {
				t.Fatalf("done message %+v: %v", msg, err)
			}
			for i, c := range msg.Content {
				if c.Type == agent.ContentFunctionCall {
					continue
				}
				var text string
				for _, ev := range events {
					if (ev.Type == agent.ModelTextDelta || ev.Type == agent.ModelThinkingDelta) && ev.Index == i {
						text += ev.Delta
					}
				}
				if text != c.Text {
					t.Fatalf("block %d %q, deltas say %q", i, c.Text, text)
				}
			}
			return
		}
		if fail == nil {
			fail = &failure{kind: agent.ErrorTransient, text: "dropped"}
		}
		if err := a.fail(fail); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzRetryAfter: any header values give a wait in [0, maxHint].
func FuzzRetryAfter(f *testing.F) {
	f.Add("", "3")
	f.Add("250", "")
	f.Add("", "Thu, 01 May 2025 12:00:07 GMT")
	f.Add("NaN", "-Inf")
	f.Add("1e308", "1e308")
	now := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ms, s string) {
		h := http.Header{}
		h.Set("retry-after-ms", ms)
		h.Set("Retry-After", s)
		if d := retryAfter(h, now); d < 0 || d > maxHint {
			t.Fatalf("retry-after-ms %q, Retry-After %q: %v", ms, s, d)
		}
	})
}

// FuzzParseErrorBody: any error body parses, and its classification is a
// known kind.
func FuzzParseErrorBody(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"m","type":"t","code":"c"}}`))
	f.Add([]byte(`{"error":{"code":400}}`))
	f.Add([]byte(`{"error":"x"}`))
	f.Add([]byte(`{"message":"x"}`))
	f.Add([]byte(`<html>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		e := parseErrorBody(body)
		for _, status := range []int{400, 401, 429, 500} {
			if k := statusKind(status, &e); !k.Valid() {
				t.Fatalf("status %d: kind %q", status, k)
			}
		}
		if k := streamErrorKind(&e); !k.Valid() {
			t.Fatalf("stream kind %q", k)
		}
		_ = fmt.Sprint(e.code())
	})
}

// FuzzDecodeChunk: decodeChunk agrees with encoding/json on every input
// encoding/json accepts, and never panics on the others.
func FuzzDecodeChunk(f *testing.F) {
	for _, name := range []string{"text", "parallel_tools", "thinking_deepseek", "thinking_ollama", "kimi"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".sse"))
		if err != nil {
			f.Fatal(err)
		}
		for _, ev := range bytes.Split(b, []byte("\n\n")) {
			if d, ok := bytes.CutPrefix(ev, []byte("data: ")); ok {
				f.Add(d)
			}
		}
	}
	f.Add([]byte(`{"Choices":[{"INDEX":1,"delta":{"content":"a\ud83d\ude00\u00e9\ud800"}}],"choices":null}`))
	f.Add([]byte(`{"choices":[{"delta":{"tool_calls":[{"index":2,"function":{"name":null,"arguments":"x"}}],"tool_calls":null}}]}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":1,"prompt_tokens_details":null},"usage":null}`))
	f.Add([]byte(`{"error":{"message":"m"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got chunk
		gerr := decodeChunk(data, &got)
		var want chunk
		if err := json.Unmarshal(data, &want); err != nil {
			return
		}
		if gerr != nil {
			t.Fatalf("%q: decodeChunk failed (%v) where encoding/json decodes", data, gerr)
		}
		got.Error = ""
		if len(got.Choices) == 0 && len(want.Choices) == 0 {
			got.Choices, want.Choices = nil, nil
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			t.Fatalf("%q:\ndecodeChunk   %s\nencoding/json %s", data, gb, wb)
		}
	})
}
