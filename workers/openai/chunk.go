package openai

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// chunk is the part of a chat.completion.chunk the provider reads, or the
// error object a server sends instead of a chunk. It is decoded by
// decodeChunk, not by the SDK's ChatCompletionChunk: several times cheaper
// per token (one pass, no reflection), and it reads what compatible
// servers add: the reasoning text (reasoning_content from DeepSeek and
// vLLM, reasoning from ollama and newer vLLM) and the usage that kimi puts
// inside the choice. The json tags document the fields (and let the fuzz
// test compare decodeChunk with encoding/json).
type chunk struct {
	Choices []chunkChoice `json:"choices"`
	Usage   *chunkUsage   `json:"usage"`
	// Error is the raw error object of an error event ({"error": …}).
	Error string `json:"-"`
}

type chunkChoice struct {
	Index        int64       `json:"index"`
	Delta        chunkDelta  `json:"delta"`
	FinishReason string      `json:"finish_reason"`
	Usage        *chunkUsage `json:"usage"`
}

type chunkDelta struct {
	Content          string          `json:"content"`
	Refusal          string          `json:"refusal"`
	ReasoningContent string          `json:"reasoning_content"`
	Reasoning        string          `json:"reasoning"`
	ToolCalls        []chunkToolCall `json:"tool_calls"`
}

// thinking is the delta's reasoning text; a server that sends both fields
// sends the same text twice.
func (d *chunkDelta) thinking() string {
	if d.ReasoningContent != "" {
		return d.ReasoningContent
	}
	return d.Reasoning
}

type chunkToolCall struct {
	Index    int64             `json:"index"`
	ID       string            `json:"id"`
	Function chunkToolFunction `json:"function"`
}

type chunkToolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chunkUsage struct {
	PromptTokens        int64         `json:"prompt_tokens"`
	CompletionTokens    int64         `json:"completion_tokens"`
	PromptTokensDetails *usageDetails `json:"prompt_tokens_details"`
	// PromptCacheHitTokens is DeepSeek's count of cached prompt tokens.
	PromptCacheHitTokens int64 `json:"prompt_cache_hit_tokens"`
	// CachedTokens is kimi's.
	CachedTokens int64 `json:"cached_tokens"`
}

type usageDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// cached is the number of prompt tokens read from the server's cache.
func (u *chunkUsage) cached() int64 {
	switch {
	case u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens > 0:
		return u.PromptTokensDetails.CachedTokens
	case u.PromptCacheHitTokens > 0:
		return u.PromptCacheHitTokens
	}
	return u.CachedTokens
}

// errMalformedChunk is returned for an event whose data is not JSON.
var errMalformedChunk = errors.New("the data is not JSON")

// decodeChunk decodes one event's data into c (reset first). Keys match
// as encoding/json matches them (exactly, else case-insensitively);
// unknown keys and values of the wrong type are skipped. The chunks that
// make up nearly all of a stream take [fastChunk]'s single pass; the
// others are validated, then walked with gjson.
func decodeChunk(data []byte, c *chunk) error {
	if fastChunk(data, c) {
		return nil
	}
	return decodeGeneral(data, c)
}

// decodeGeneral is decodeChunk's general path.
func decodeGeneral(data []byte, c *chunk) error {
	if !gjson.ValidBytes(data) {
		return errMalformedChunk
	}
	*c = chunk{Choices: c.Choices[:0]}
	gjson.ParseBytes(data).ForEach(func(k, v gjson.Result) bool {
		switch fieldKey(k.Str, "choices", "usage", "error") {
		case "choices":
			c.Choices = c.Choices[:0]
			if v.IsArray() {
				v.ForEach(func(_, ch gjson.Result) bool {
					c.Choices = append(c.Choices, decodeChoice(ch))
					return true
				})
			}
		case "usage":
			c.Usage = decodeUsage(v)
		case "error":
			if v.Type != gjson.Null {
				c.Error = v.Raw
			}
		}
		return true
	})
	return nil
}

func decodeChoice(v gjson.Result) chunkChoice {
	var ch chunkChoice
	v.ForEach(func(k, v gjson.Result) bool {
		switch fieldKey(k.Str, "index", "delta", "finish_reason", "usage") {
		case "index":
			ch.Index = intOf(v, ch.Index)
		case "delta":
			if v.IsObject() {
				decodeDelta(v, &ch.Delta)
			}
		case "finish_reason":
			ch.FinishReason = strOf(v, ch.FinishReason)
		case "usage":
			ch.Usage = decodeUsage(v)
		}
		return true
	})
	return ch
}

func decodeDelta(v gjson.Result, d *chunkDelta) {
	v.ForEach(func(k, v gjson.Result) bool {
		switch fieldKey(k.Str, "content", "refusal", "reasoning_content", "reasoning", "tool_calls") {
		case "content":
			d.Content = strOf(v, d.Content)
		case "refusal":
			d.Refusal = strOf(v, d.Refusal)
		case "reasoning_content":
			d.ReasoningContent = strOf(v, d.ReasoningContent)
		case "reasoning":
			d.Reasoning = strOf(v, d.Reasoning)
		case "tool_calls":
			d.ToolCalls = d.ToolCalls[:0]
			switch {
			case v.Type == gjson.Null:
				d.ToolCalls = nil
			case v.IsArray() && d.ToolCalls == nil:
				d.ToolCalls = []chunkToolCall{} // [] is empty, not absent, as with encoding/json
			}
			if v.IsArray() {
				v.ForEach(func(_, tc gjson.Result) bool {
					d.ToolCalls = append(d.ToolCalls, decodeToolCall(tc))
					return true
				})
			}
		}
		return true
	})
}

func decodeToolCall(v gjson.Result) chunkToolCall {
	var tc chunkToolCall
	v.ForEach(func(k, v gjson.Result) bool {
		switch fieldKey(k.Str, "index", "id", "function") {
		case "index":
			tc.Index = intOf(v, tc.Index)
		case "id":
			tc.ID = strOf(v, tc.ID)
		case "function":
			v.ForEach(func(k, v gjson.Result) bool {
				switch fieldKey(k.Str, "name", "arguments") {
				case "name":
					tc.Function.Name = strOf(v, tc.Function.Name)
				case "arguments":
					tc.Function.Arguments = strOf(v, tc.Function.Arguments)
				}
				return true
			})
		}
		return true
	})
	return tc
}

func decodeUsage(v gjson.Result) *chunkUsage {
	if !v.IsObject() {
		return nil
	}
	u := &chunkUsage{}
	v.ForEach(func(k, v gjson.Result) bool {
		switch fieldKey(k.Str, "prompt_tokens", "completion_tokens", "prompt_tokens_details", "prompt_cache_hit_tokens", "cached_tokens") {
		case "prompt_tokens":
			u.PromptTokens = intOf(v, u.PromptTokens)
		case "completion_tokens":
			u.CompletionTokens = intOf(v, u.CompletionTokens)
		case "prompt_cache_hit_tokens":
			u.PromptCacheHitTokens = intOf(v, u.PromptCacheHitTokens)
		case "cached_tokens":
			u.CachedTokens = intOf(v, u.CachedTokens)
		case "prompt_tokens_details":
			if !v.IsObject() {
				u.PromptTokensDetails = nil
				return true
			}
			d := &usageDetails{}
			v.ForEach(func(k, v gjson.Result) bool {
				if fieldKey(k.Str, "cached_tokens") == "cached_tokens" {
					d.CachedTokens = intOf(v, d.CachedTokens)
				}
				return true
			})
			u.PromptTokensDetails = d
		}
		return true
	})
	return u
}

// fieldKey is the known key k names: itself, or the one it equals when
// case is ignored (as encoding/json matches); "" for an unknown key.
func fieldKey(k string, known ...string) string {
	for _, f := range known {
		if k == f {
			return f
		}
	}
	for _, f := range known {
		if strings.EqualFold(k, f) {
			return f
		}
	}
	return ""
}

// strOf is a string value, with invalid UTF-8 replaced as encoding/json
// does; other types leave old (null clears it).
func strOf(v gjson.Result, old string) string {
	switch v.Type {
	case gjson.String:
		s := v.Str
		if !utf8.ValidString(s) {
			s = validUTF8(s)
		}
		return s
	case gjson.Null:
		return ""
	}
	return old
}

// intOf is an integer value; other types leave old (null clears it).
func intOf(v gjson.Result, old int64) int64 {
	switch v.Type {
	case gjson.Number:
		return v.Int()
	case gjson.Null:
		return 0
	}
	return old
}

// validUTF8 replaces each invalid byte with U+FFFD, as encoding/json does.
func validUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
