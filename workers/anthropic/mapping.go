package anthropic

import (
	"fmt"
	"hash/fnv"
	"maps"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// InterruptedResult is the text of the synthetic tool_result that answers a
// call the transcript has no result for (a crash cut the turn): the API
// refuses a tool_use without a tool_result in the next user turn.
const InterruptedResult = agent.InterruptedText

// Default and per-model output budgets. The Messages API requires
// max_tokens; a request without one gets the model's maximum output.
const defaultMaxTokens = 8192

// maxTokensByPrefix is the largest output of each model family, longest
// prefix first where prefixes overlap.
var maxTokensByPrefix = []struct {
	prefix string
	tokens int64
}{
	{"claude-opus-4-1", 32000},
	{"claude-opus-4-0", 32000},
	{"claude-opus-4-2025", 32000},
	{"claude-opus-4-5", 64000},
	{"claude-opus-4", 64000},
	{"claude-sonnet-4", 64000},
	{"claude-haiku-4", 64000},
	{"claude-3-7-sonnet", 64000},
	{"claude-3-5-sonnet", 8192},
	{"claude-3-5-haiku", 8192},
	{"claude-3-opus", 4096},
	{"claude-3-haiku", 4096},
	{"claude-3-sonnet", 4096},
}

// thinkingBudget is the budget_tokens of each thinking level.
var thinkingBudget = map[string]int64{ThinkingLow: 1024, ThinkingMedium: 4096, ThinkingHigh: 16384}

// adaptiveThinking lists the models for which budget-based thinking is
// deprecated (the SDK warns on stderr for them): they get
// thinking {type: adaptive} and output_config.effort = the level.
var adaptiveThinking = map[string]bool{"claude-opus-4-6": true, "claude-mythos-preview": true}

// modelMaxTokens is the output budget of a model without max_tokens: its
// family's largest output, or [defaultMaxTokens].
func modelMaxTokens(model string) int64 {
	for _, m := range maxTokensByPrefix {
		if strings.HasPrefix(model, m.prefix) {
			return m.tokens
		}
	}
	return defaultMaxTokens
}

// mapped is a request ready for the Messages API, with what the mapping
// learned about it.
type mapped struct {
	params sdk.MessageNewParams
	names  agent.ToolNames
	// thinkingDropped is set when a thinking level was asked for but the
	// transcript continues a tool loop whose assistant turn does not start
	// with a signed (or redacted) thinking block: the loop ran without
	// thinking, or its thinking was not signed, and the API would refuse
	// the request with thinking on.
	thinkingDropped bool
	// synthetic counts the interrupted results added for orphaned calls.
	synthetic int
}

// buildParams maps req onto the Messages API: the system prompt (cached),
// the tools (the last one cached) named by [agent.NewToolNames], the
// transcript as alternating user and assistant turns, max_tokens and
// thinking. A transcript that maps onto nothing is an [ErrInvalidRequest].
func buildParams(req agent.ProviderRequest) (mapped, error) {
	ids := make([]string, 0, len(req.Tools))
	for _, t := range req.Tools {
		ids = append(ids, t.FunctionID)
	}
	m := mapped{names: agent.NewToolNames(ids)}
	p := &m.params
	p.Model = req.Model
	if req.SystemPrompt != "" {
		p.System = []sdk.TextBlockParam{{Text: req.SystemPrompt, CacheControl: sdk.NewCacheControlEphemeralParam()}}
	}
	p.Tools = tools(req.Tools, m.names)
	tr := transcript(req.Messages, m.names, len(p.Tools) > 0)
	if len(tr.messages) == 0 {
		return mapped{}, fmt.Errorf("%w: the transcript has no content the Messages API accepts", ErrInvalidRequest)
	}
	p.Messages, m.synthetic = tr.messages, tr.synthetic

	maxTokens := int64(req.MaxTokens)
	ceiling := modelMaxTokens(req.Model)
	if maxTokens == 0 {
		maxTokens = ceiling
	}
	if budget, ok := thinkingBudget[req.ThinkingLevel]; ok {
		switch {
		case tr.loop && !tr.signed:
			// The final assistant turn is a tool loop's and would have to
			// start with its signed thinking block, which it does not have
			// (the loop ran without thinking, its thinking is unsigned or
			// another provider's, or a text comes first): this request
			// runs without thinking, as the loop did.
			m.thinkingDropped = true
		case adaptiveThinking[req.Model]:
			p.Thinking = sdk.ThinkingConfigParamUnion{OfAdaptive: &sdk.ThinkingConfigAdaptiveParam{}}
			p.OutputConfig = sdk.OutputConfigParam{Effort: sdk.OutputConfigEffort(req.ThinkingLevel)}
		default:
			if maxTokens <= budget {
				// budget_tokens must stay below max_tokens: leave room for
				// the answer after the thinking.
				maxTokens = budget + min(ceiling, defaultMaxTokens)
			}
			p.Thinking = sdk.ThinkingConfigParamUnion{OfEnabled: &sdk.ThinkingConfigEnabledParam{BudgetTokens: budget}}
		}
	}
	p.MaxTokens = maxTokens
	return m, nil
}

// tools maps the offered functions onto tool definitions; a function id
// offered twice is offered once. The last tool carries the cache
// breakpoint, so the whole tool list is cached with the system prompt.
func tools(in []agent.Tool, names agent.ToolNames) []sdk.ToolUnionParam {
	if len(in) == 0 {
		return nil
	}
	out := make([]sdk.ToolUnionParam, 0, len(in))
	seen := make(map[string]bool, len(in))
	for _, t := range in {
		if seen[t.FunctionID] {
			continue
		}
		seen[t.FunctionID] = true
		tp := &sdk.ToolParam{Name: names.Name(t.FunctionID), InputSchema: inputSchema(t.InputSchema)}
		if t.Description != "" {
			tp.Description = sdk.String(t.Description)
		}
		out = append(out, sdk.ToolUnionParam{OfTool: tp})
	}
	out[len(out)-1].OfTool.CacheControl = sdk.NewCacheControlEphemeralParam()
	return out
}

// inputSchema carries a JSON Schema over as the tool's input_schema. The
// API wants an object schema: "type" is always "object", every other
// keyword passes through as it is; no schema is {"type": "object",
// "properties": {}}.
func inputSchema(schema map[string]any) sdk.ToolInputSchemaParam {
	extra := maps.Clone(schema)
	delete(extra, "type")
	if len(extra) == 0 {
		// Any object: the schema must not be empty, or it is left out.
		return sdk.ToolInputSchemaParam{Properties: map[string]any{}}
	}
	return sdk.ToolInputSchemaParam{ExtraFields: extra}
}

// turn is one message of the request under construction.
type turn struct {
	assistant bool
	blocks    []sdk.ContentBlockParamUnion
	// calls are an assistant turn's tool_use blocks.
	calls []call
	// results are the tool results of a user turn, placed by fixup.
	results []result
}

// call is a tool_use of an assistant turn: the id its results name (the
// call id made API-safe) and the id it has in the request, which differs
// when an earlier call of the transcript had the same one (the API wants
// them unique).
type call struct {
	ref, id string
}

// result is a function_result message on its way into a user turn.
type result struct {
	id     string // the vendor id of its call
	msg    agent.Message
	blocks []sdk.ToolResultBlockParamContentUnion
}

// mappedTranscript is a transcript as the Messages API takes it, with what
// the mapping learned about it.
type mappedTranscript struct {
	messages []sdk.MessageParam
	// synthetic counts the interrupted results made up for orphaned calls.
	synthetic int
	// loop is set when the request continues a tool loop: the last
	// assistant turn has calls.
	loop bool
	// signed is set when the last assistant turn starts with a signed
	// thinking block or a redacted one, as the API wants of a tool loop's
	// turn when thinking is on.
	signed bool
}

// transcript maps messages onto alternating user and assistant turns:
// consecutive messages of one side merge, function results join the next
// user turn (results first, in the order of the calls), a call without a
// result gets an [InterruptedResult], and a result without its call in the
// turn just before becomes text. Without tools (native bool false), calls
// and results are written out as text, since the API refuses tool blocks
// in a request that defines no tools. Assistant thinking goes back as
// [assistantBlocks] says.
func transcript(msgs []agent.Message, names agent.ToolNames, native bool) mappedTranscript {
	var turns []*turn
	used := map[string]bool{}
	side := func(assistant bool) *turn {
		if n := len(turns); n > 0 && turns[n-1].assistant == assistant {
			return turns[n-1]
		}
		t := &turn{assistant: assistant}
		turns = append(turns, t)
		return t
	}
	for _, m := range msgs {
		switch m.Role {
		case agent.RoleUser:
			if blocks := userBlocks(m.Content); len(blocks) > 0 {
				t := side(false)
				t.blocks = append(t.blocks, blocks...)
			}
		case agent.RoleAssistant:
			blocks, calls := assistantBlocks(m, names, native, used)
			if len(blocks) > 0 {
				t := side(true)
				t.blocks = append(t.blocks, blocks...)
				t.calls = append(t.calls, calls...)
			}
		case agent.RoleFunctionResult:
			t := side(false)
			if native {
				t.results = append(t.results, result{id: toolUseID(m.FunctionCallID), msg: m, blocks: resultBlocks(m.Content)})
			} else {
				t.blocks = append(t.blocks, resultAsText(m)...)
			}
		}
	}
	if n := len(turns); n > 0 && turns[n-1].assistant && len(turns[n-1].calls) > 0 {
		turns = append(turns, &turn{}) // a home for the orphans' results
	}
	out := make([]sdk.MessageParam, 0, len(turns)+1)
	if len(turns) > 0 && turns[0].assistant {
		// The API wants a user turn first.
		out = append(out, sdk.NewUserMessage(sdk.NewTextBlock("(conversation continues)")))
	}
	tr := mappedTranscript{}
	for i, t := range turns {
		if t.assistant {
			out = append(out, sdk.NewAssistantMessage(t.blocks...))
			tr.loop = len(t.calls) > 0
			tr.signed = t.blocks[0].OfThinking != nil || t.blocks[0].OfRedactedThinking != nil
			continue
		}
		var calls []call
		if i > 0 {
			calls = turns[i-1].calls
		}
		blocks, made := fixup(calls, t)
		tr.synthetic += made
		if len(blocks) > 0 {
			out = append(out, sdk.NewUserMessage(blocks...))
		}
	}
	tr.messages = out
	return tr
}

// fixup lays out a user turn after an assistant turn with calls: one
// tool_result per call in the calls' order (the first result of that id, or
// an interrupted one), then the results that answer no call of that turn
// as text, then the turn's own blocks. It returns how many results it made
// up.
func fixup(calls []call, t *turn) ([]sdk.ContentBlockParamUnion, int) {
	blocks := make([]sdk.ContentBlockParamUnion, 0, len(calls)+len(t.results)+len(t.blocks))
	used := make([]bool, len(t.results))
	made := 0
	for _, c := range calls {
		id := c.id
		found := false
		for j, r := range t.results {
			if !used[j] && r.id == c.ref {
				used[j], found = true, true
				tr := &sdk.ToolResultBlockParam{ToolUseID: id, Content: r.blocks}
				if r.msg.IsError {
					tr.IsError = sdk.Bool(true)
				}
				blocks = append(blocks, sdk.ContentBlockParamUnion{OfToolResult: tr})
				break
			}
		}
		if !found {
			made++
			blocks = append(blocks, sdk.NewToolResultBlock(id, InterruptedResult, true))
		}
	}
	for j, r := range t.results {
		if !used[j] {
			blocks = append(blocks, resultAsText(r.msg)...)
		}
	}
	return append(blocks, t.blocks...), made
}

// userBlocks maps a user message's text and images.
func userBlocks(content []agent.Content) []sdk.ContentBlockParamUnion {
	var out []sdk.ContentBlockParamUnion
	for _, c := range content {
		switch c.Type {
		case agent.ContentText:
			if c.Text != "" {
				out = append(out, sdk.NewTextBlock(c.Text))
			}
		case agent.ContentImage:
			out = append(out, imageBlock(c))
		}
	}
	return out
}

// imageBlock is an image as a base64 source, or a note in its place when
// the API does not take its type.
func imageBlock(c agent.Content) sdk.ContentBlockParamUnion {
	if mt, ok := mediaType(c.Mime); ok && c.Data != "" {
		return sdk.NewImageBlockBase64(mt, c.Data)
	}
	return sdk.NewTextBlock(fmt.Sprintf("[an image of type %q was left out: the Messages API takes jpeg, png, gif and webp]", c.Mime))
}

// mediaType normalizes an image MIME type to one the API takes.
func mediaType(mime string) (string, bool) {
	mime = strings.ToLower(strings.TrimSpace(mime))
	if i := strings.IndexByte(mime, ';'); i >= 0 {
		mime = strings.TrimSpace(mime[:i])
	}
	switch mime {
	case "image/jpeg", "image/jpg", "image/pjpeg":
		return string(sdk.Base64ImageSourceMediaTypeImageJPEG), true
	case "image/png":
		return string(sdk.Base64ImageSourceMediaTypeImagePNG), true
	case "image/gif":
		return string(sdk.Base64ImageSourceMediaTypeImageGIF), true
	case "image/webp":
		return string(sdk.Base64ImageSourceMediaTypeImageWebP), true
	}
	return "", false
}

// assistantBlocks maps an assistant message: its text, its calls and its
// thinking, in their order. A thinking block goes back only as the API
// sent it: with its signature as a thinking block, or, when it has Data
// (a redacted one), as a redacted_thinking block with that data; one with
// neither is dropped (the API refuses unsigned thinking), and so is the
// thinking of a message another provider wrote (its signatures are not
// Anthropic's). Thinking after the message's last other block (a stream
// cut while thinking) is dropped too: the API wants no assistant message
// to end with thinking. Images are dropped (an assistant turn cannot carry
// one).
func assistantBlocks(m agent.Message, names agent.ToolNames, native bool, used map[string]bool) ([]sdk.ContentBlockParamUnion, []call) {
	var out []sdk.ContentBlockParamUnion
	var calls []call
	ours := m.Provider == "" || m.Provider == ProviderName
	end := 0 // out[:end] ends with a block that is not thinking
	for _, c := range m.Content {
		switch c.Type {
		case agent.ContentThinking:
			switch {
			case !ours:
			case c.Data != "":
				out = append(out, sdk.NewRedactedThinkingBlock(c.Data))
			case c.Signature != "":
				out = append(out, sdk.NewThinkingBlock(c.Signature, c.Text))
			}
		case agent.ContentText:
			if c.Text != "" {
				out = append(out, sdk.NewTextBlock(c.Text))
				end = len(out)
			}
		case agent.ContentFunctionCall:
			if !native {
				out = append(out, sdk.NewTextBlock(callAsText(c)))
				end = len(out)
				continue
			}
			ref := toolUseID(c.ID)
			id := ref
			for n := 2; used[id]; n++ {
				id = toolUseID(fmt.Sprintf("%s_%d", ref, n))
			}
			used[id] = true
			var input any = c.Arguments
			if c.Arguments == nil {
				input = map[string]any{}
			}
			out = append(out, sdk.NewToolUseBlock(id, input, names.Name(c.FunctionID)))
			calls = append(calls, call{ref: ref, id: id})
			end = len(out)
		}
	}
	return out[:end], calls
}

// resultBlocks maps a function result's content into tool_result content:
// text and images.
func resultBlocks(content []agent.Content) []sdk.ToolResultBlockParamContentUnion {
	var out []sdk.ToolResultBlockParamContentUnion
	for _, c := range content {
		switch c.Type {
		case agent.ContentText:
			if c.Text != "" {
				out = append(out, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: c.Text}})
			}
		case agent.ContentImage:
			b := imageBlock(c)
			if b.OfImage != nil {
				out = append(out, sdk.ToolResultBlockParamContentUnion{OfImage: b.OfImage})
			} else {
				out = append(out, sdk.ToolResultBlockParamContentUnion{OfText: b.OfText})
			}
		}
	}
	return out
}

// callAsText writes a call out for a request without tools.
func callAsText(c agent.Content) string {
	args := "{}"
	if len(c.Arguments) > 0 {
		if b, err := wire.MarshalJSON(c.Arguments); err == nil {
			args = string(b)
		}
	}
	return fmt.Sprintf("[called %s (call %s) with %s]", c.FunctionID, c.ID, args)
}

// resultAsText writes a function result out as text (and its images), for
// a result whose call is not in the turn before, or a request without
// tools.
func resultAsText(m agent.Message) []sdk.ContentBlockParamUnion {
	status := "result"
	if m.IsError {
		status = "error"
	}
	var text strings.Builder
	fmt.Fprintf(&text, "[%s of %s (call %s)]", status, m.FunctionID, m.FunctionCallID)
	var images []sdk.ContentBlockParamUnion
	for _, c := range m.Content {
		switch c.Type {
		case agent.ContentText:
			if c.Text != "" {
				text.WriteString("\n")
				text.WriteString(c.Text)
			}
		case agent.ContentImage:
			images = append(images, imageBlock(c))
		}
	}
	return append([]sdk.ContentBlockParamUnion{sdk.NewTextBlock(text.String())}, images...)
}

// maxToolUseID bounds a tool_use id the API gets.
const maxToolUseID = 128

// toolUseID is the id a call has on the API: the call id when it matches
// ^[A-Za-z0-9_-]{1,128}$ (every id Anthropic hands out does), otherwise the
// id with each other byte replaced by '_', cut short, and suffixed with a
// hash of the original so distinct ids stay distinct.
func toolUseID(id string) string {
	ok := id != "" && len(id) <= maxToolUseID
	for i := 0; ok && i < len(id); i++ {
		ok = isIDByte(id[i])
	}
	if ok {
		return id
	}
	b := []byte(id)
	for i, c := range b {
		if !isIDByte(c) {
			b[i] = '_'
		}
	}
	const suffixLen = 1 + 16
	if len(b) > maxToolUseID-suffixLen {
		b = b[:maxToolUseID-suffixLen]
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("%s_%016x", b, h.Sum64())
}

func isIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
