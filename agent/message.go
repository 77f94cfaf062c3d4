package agent

import "fmt"

// Role says who wrote a [Message].
type Role string

// Roles of SPEC §5.
const (
	RoleUser           Role = "user"
	RoleAssistant      Role = "assistant"
	RoleFunctionResult Role = "function_result"
)

// Valid reports whether r is one of the known roles.
func (r Role) Valid() bool {
	return r == RoleUser || r == RoleAssistant || r == RoleFunctionResult
}

// ContentType names the kind of a [Content] block.
type ContentType string

// Content block types of SPEC §5.
const (
	ContentText         ContentType = "text"
	ContentImage        ContentType = "image"
	ContentThinking     ContentType = "thinking"
	ContentFunctionCall ContentType = "function_call"
)

// Valid reports whether t is one of the known content types.
func (t ContentType) Valid() bool {
	return t == ContentText || t == ContentImage || t == ContentThinking || t == ContentFunctionCall
}

// StopReason says why a model call or a run ended.
type StopReason string

// Stop reasons of SPEC §4. On an assistant message they are the provider's;
// on agent_end they describe the run (see package turn for which one a run
// ends with).
const (
	StopEnd            StopReason = "end"
	StopLength         StopReason = "length"
	StopFunctionCall   StopReason = "function_call"
	StopAborted        StopReason = "aborted"
	StopError          StopReason = "error"
	StopBudgetExceeded StopReason = "budget_exceeded"
)

// Valid reports whether s is one of the known stop reasons.
func (s StopReason) Valid() bool {
	switch s {
	case StopEnd, StopLength, StopFunctionCall, StopAborted, StopError, StopBudgetExceeded:
		return true
	}
	return false
}

// Message is one AgentMessage of SPEC §5. Which fields are set depends on
// Role:
//
//   - user: Content, Timestamp.
//   - assistant: Content, StopReason, Usage, Model, Provider, Timestamp, and
//     ErrorMessage when StopReason is "error".
//   - function_result: FunctionCallID, FunctionID, Content, Details,
//     IsError, Timestamp.
//
// Timestamp is Unix milliseconds. Values inside a Message (content,
// arguments, details) are shared by reference when a Message is copied:
// treat them as immutable.
type Message struct {
	Role    Role      `json:"role"`
	Content []Content `json:"content"`
	// Timestamp is when the message was written, in Unix milliseconds.
	Timestamp int64 `json:"timestamp,omitempty"`

	StopReason StopReason `json:"stop_reason,omitempty"`
	Usage      *Usage     `json:"usage,omitempty"`
	Model      string     `json:"model,omitempty"`
	Provider   string     `json:"provider,omitempty"`
	// ErrorMessage explains an assistant message that ended with
	// stop_reason "error". It is an addition to SPEC §5.
	ErrorMessage string `json:"error_message,omitempty"`

	FunctionCallID string `json:"function_call_id,omitempty"`
	FunctionID     string `json:"function_id,omitempty"`
	Details        any    `json:"details,omitempty"`
	IsError        bool   `json:"is_error,omitempty"`
}

// Content is one content block of a [Message]: text {text}, image {mime,
// data} (data is base64), thinking {text, signature?, data?} or
// function_call {id, function_id, arguments}. A thinking block with Data
// is a provider's opaque (redacted) thinking: no text, sent back as is.
type Content struct {
	Type       ContentType    `json:"type"`
	Text       string         `json:"text,omitempty"`
	Mime       string         `json:"mime,omitempty"`
	Data       string         `json:"data,omitempty"`
	ID         string         `json:"id,omitempty"`
	FunctionID string         `json:"function_id,omitempty"`
	Arguments  map[string]any `json:"arguments,omitempty"`
	// Signature is a provider's opaque signature of a thinking block
	// (Anthropic): the block can only be sent back to the model with it.
	Signature string `json:"signature,omitempty"`
}

// FunctionCall is the view of a function_call content block: the call the
// model asked for.
type FunctionCall struct {
	ID         string
	FunctionID string
	Arguments  map[string]any
}

// Text returns a text content block.
func Text(s string) Content { return Content{Type: ContentText, Text: s} }

// UserText returns a user message with one text block.
func UserText(s string, timestampMs int64) Message {
	return Message{Role: RoleUser, Content: []Content{Text(s)}, Timestamp: timestampMs}
}

// FunctionCall returns the call a function_call block carries, and false
// for any other block.
func (c Content) FunctionCall() (FunctionCall, bool) {
	if c.Type != ContentFunctionCall {
		return FunctionCall{}, false
	}
	return FunctionCall{ID: c.ID, FunctionID: c.FunctionID, Arguments: c.Arguments}, true
}

// FunctionCalls returns the function calls of m in the order the model
// wrote them; nil when m has none.
func (m Message) FunctionCalls() []FunctionCall {
	var calls []FunctionCall
	for _, c := range m.Content {
		if fc, ok := c.FunctionCall(); ok {
			calls = append(calls, fc)
		}
	}
	return calls
}

// Validate checks a content block: a known type, and the fields that type
// needs (mime and data for an image; a valid id and a function id for a
// function call).
func (c Content) Validate() error {
	switch c.Type {
	case ContentText, ContentThinking:
		return nil
	case ContentImage:
		if c.Mime == "" || c.Data == "" {
			return fmt.Errorf("%w: image block needs mime and data", ErrInvalidMessage)
		}
		return nil
	case ContentFunctionCall:
		if err := ValidateCallID(c.ID); err != nil {
			return fmt.Errorf("%w: function_call block: %w", ErrInvalidMessage, err)
		}
		if err := validName("function_id", c.FunctionID); err != nil {
			return fmt.Errorf("%w: function_call block: %v", ErrInvalidMessage, err)
		}
		return nil
	case "":
		return fmt.Errorf("%w: content block has no type", ErrInvalidMessage)
	default:
		return fmt.Errorf("%w: unknown content type %q", ErrInvalidMessage, c.Type)
	}
}

// Validate checks m: a known role, valid content blocks of the kinds that
// role may carry (user: text and image, at least one block; assistant:
// text, thinking, function_call and image; function_result: text and image),
// unique function call ids, a known stop reason when set, for a
// function result its call id and function id, and no NaN or infinity in
// its arguments, details or cost (JSON cannot carry them; a msgpack
// caller can send them).
func (m Message) Validate() error {
	if !m.Role.Valid() {
		return fmt.Errorf("%w: unknown role %q", ErrInvalidMessage, m.Role)
	}
	if m.StopReason != "" && !m.StopReason.Valid() {
		return fmt.Errorf("%w: unknown stop_reason %q", ErrInvalidMessage, m.StopReason)
	}
	if m.Role == RoleUser && len(m.Content) == 0 {
		return fmt.Errorf("%w: user message has no content", ErrInvalidMessage)
	}
	var ids map[string]bool
	for i, c := range m.Content {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("content[%d]: %w", i, err)
		}
		if err := checkFinite(fmt.Sprintf("content[%d].arguments", i), c.Arguments); err != nil {
			return err
		}
		switch {
		case m.Role != RoleAssistant && (c.Type == ContentThinking || c.Type == ContentFunctionCall):
			return fmt.Errorf("%w: content[%d]: a %s message cannot carry a %s block", ErrInvalidMessage, i, m.Role, c.Type)
		case c.Type == ContentFunctionCall:
			if ids[c.ID] {
				return fmt.Errorf("%w: content[%d]: duplicate function call id %q", ErrInvalidMessage, i, c.ID)
			}
			if ids == nil {
				ids = make(map[string]bool)
			}
			ids[c.ID] = true
		}
	}
	if err := checkFinite("details", m.Details); err != nil {
		return err
	}
	if m.Usage != nil {
		if err := checkFinite("usage.cost_usd", m.Usage.CostUSD); err != nil {
			return err
		}
	}
	if m.Role == RoleFunctionResult {
		if err := ValidateCallID(m.FunctionCallID); err != nil {
			return fmt.Errorf("%w: function_result: %w", ErrInvalidMessage, err)
		}
		if err := validName("function_id", m.FunctionID); err != nil {
			return fmt.Errorf("%w: function_result: %v", ErrInvalidMessage, err)
		}
	}
	return nil
}

// Usage counts the tokens of one model call (or a sum of them) and, when
// the provider knows prices, its cost.
type Usage struct {
	InputTokens      int64   `json:"input_tokens"`
	OutputTokens     int64   `json:"output_tokens"`
	CacheReadTokens  int64   `json:"cache_read_tokens"`
	CacheWriteTokens int64   `json:"cache_write_tokens"`
	CostUSD          float64 `json:"cost_usd,omitempty"`
}

// Add returns the field-wise sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + v.InputTokens,
		OutputTokens:     u.OutputTokens + v.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
		CostUSD:          u.CostUSD + v.CostUSD,
	}
}
