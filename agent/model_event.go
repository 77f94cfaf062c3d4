package agent

import "fmt"

// ModelEventType names an AssistantMessageEvent of a provider stream.
type ModelEventType string

// Model event types of SPEC §4 (providers).
const (
	ModelStart             ModelEventType = "start"
	ModelTextStart         ModelEventType = "text_start"
	ModelTextDelta         ModelEventType = "text_delta"
	ModelTextEnd           ModelEventType = "text_end"
	ModelThinkingStart     ModelEventType = "thinking_start"
	ModelThinkingDelta     ModelEventType = "thinking_delta"
	ModelThinkingEnd       ModelEventType = "thinking_end"
	ModelFunctionCallStart ModelEventType = "functioncall_start"
	ModelFunctionCallDelta ModelEventType = "functioncall_delta"
	ModelFunctionCallEnd   ModelEventType = "functioncall_end"
	ModelUsage             ModelEventType = "usage"
	ModelStop              ModelEventType = "stop"
	ModelDone              ModelEventType = "done"
	ModelError             ModelEventType = "error"
)

// Valid reports whether t is one of the known model event types.
func (t ModelEventType) Valid() bool {
	switch t {
	case ModelStart, ModelTextStart, ModelTextDelta, ModelTextEnd,
		ModelThinkingStart, ModelThinkingDelta, ModelThinkingEnd,
		ModelFunctionCallStart, ModelFunctionCallDelta, ModelFunctionCallEnd,
		ModelUsage, ModelStop, ModelDone, ModelError:
		return true
	}
	return false
}

// ErrorKind classifies a provider failure so the caller knows what to do:
// refresh credentials, back off, compact history, retry, or give up.
type ErrorKind string

// Error kinds of SPEC §4.
const (
	ErrorAuthExpired     ErrorKind = "auth_expired"
	ErrorRateLimited     ErrorKind = "rate_limited"
	ErrorContextOverflow ErrorKind = "context_overflow"
	ErrorTransient       ErrorKind = "transient"
	ErrorPermanent       ErrorKind = "permanent"
)

// Valid reports whether k is one of the known error kinds.
func (k ErrorKind) Valid() bool {
	switch k {
	case ErrorAuthExpired, ErrorRateLimited, ErrorContextOverflow, ErrorTransient, ErrorPermanent:
		return true
	}
	return false
}

// Retryable reports whether the same request may succeed later without a
// change (rate limits and transient failures).
func (k ErrorKind) Retryable() bool { return k == ErrorRateLimited || k == ErrorTransient }

// ModelEvent is one AssistantMessageEvent: one frame of a
// provider::<name>::stream channel. Fields by type:
//
//   - start: Message (the empty assistant message: model, provider), optional.
//   - text_start, thinking_start: Index (of the content block).
//   - text_delta, thinking_delta: Index, Delta (text).
//   - text_end, thinking_end: Index, Content (the finished block), optional.
//   - functioncall_start: Index, ID, FunctionID.
//   - functioncall_delta: Index, Delta (a fragment of the JSON arguments).
//   - functioncall_end: Index, Content (the finished function_call block).
//   - usage: Usage (running totals).
//   - stop: StopReason.
//   - done: Message (the final assistant message). Ends the stream.
//   - error: Kind, Error (text) and, optionally, Message (the partial
//     assistant message). Ends the stream.
type ModelEvent struct {
	Type       ModelEventType `json:"type"`
	Index      int            `json:"index,omitempty"`
	Delta      string         `json:"delta,omitempty"`
	ID         string         `json:"id,omitempty"`
	FunctionID string         `json:"function_id,omitempty"`
	Content    *Content       `json:"content,omitempty"`
	Usage      *Usage         `json:"usage,omitempty"`
	StopReason StopReason     `json:"stop_reason,omitempty"`
	Message    *Message       `json:"message,omitempty"`
	Kind       ErrorKind      `json:"kind,omitempty"`
	Error      string         `json:"error,omitempty"`
	// RetryAfterMs is the provider's hint for a rate_limited error.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
}

// Validate checks e: a known type, a non-negative index, and the fields its
// type requires (done: an assistant message; error: a known kind; stop: a
// known stop reason; functioncall_start: a valid call id; usage: usage).
func (e ModelEvent) Validate() error {
	if !e.Type.Valid() {
		return fmt.Errorf("%w: unknown type %q", ErrInvalidModelEvent, e.Type)
	}
	if e.Index < 0 {
		return fmt.Errorf("%w: %s: negative index", ErrInvalidModelEvent, e.Type)
	}
	switch e.Type {
	case ModelDone:
		if e.Message == nil || e.Message.Role != RoleAssistant {
			return fmt.Errorf("%w: done needs an assistant message", ErrInvalidModelEvent)
		}
		if err := e.Message.Validate(); err != nil {
			return fmt.Errorf("%w: done: %w", ErrInvalidModelEvent, err)
		}
	case ModelError:
		if !e.Kind.Valid() {
			return fmt.Errorf("%w: error: unknown kind %q", ErrInvalidModelEvent, e.Kind)
		}
	case ModelStop:
		if !e.StopReason.Valid() {
			return fmt.Errorf("%w: stop: unknown stop_reason %q", ErrInvalidModelEvent, e.StopReason)
		}
	case ModelFunctionCallStart:
		if err := ValidateCallID(e.ID); err != nil {
			return fmt.Errorf("%w: functioncall_start: %w", ErrInvalidModelEvent, err)
		}
	case ModelFunctionCallEnd:
		if e.Content == nil || e.Content.Type != ContentFunctionCall {
			return fmt.Errorf("%w: functioncall_end needs a function_call block", ErrInvalidModelEvent)
		}
		if err := e.Content.Validate(); err != nil {
			return fmt.Errorf("%w: functioncall_end: %w", ErrInvalidModelEvent, err)
		}
	case ModelUsage:
		if e.Usage == nil {
			return fmt.Errorf("%w: usage event without usage", ErrInvalidModelEvent)
		}
	}
	return nil
}
